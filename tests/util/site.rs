//! A throw-away ctxhost home with a plugins dir, for the tests that run
//! `ctxhost serve` (or its routes in-process) over plugins they put there
//! (agent loop, FaustBot).

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::examples::copy_example;
use super::http::Daemon;
use super::routes::InProcess;

/// A home with a plugins dir.
pub struct Site {
    dir: tempfile::TempDir,
}

impl Site {
    pub fn new() -> Site {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("plugins")).unwrap();
        Site { dir }
    }

    pub fn home(&self) -> &Path {
        self.dir.path()
    }

    pub fn plugin_dir(&self, name: &str) -> PathBuf {
        self.home().join("plugins").join(name)
    }

    /// `guest-examples/<path>` into the plugins dir, named by its last part.
    pub fn example(&self, path: &str) {
        let name = path.rsplit('/').next().unwrap_or(path);
        copy_example(path, &self.plugin_dir(name));
    }

    /// The lines a test plugin appended to `<plugin>/log.jsonl`.
    pub fn log(&self, name: &str) -> Vec<Value> {
        std::fs::read_to_string(self.plugin_dir(name).join("log.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{name}/log.jsonl: {e}: {l}")))
            .collect()
    }

    /// `ctxhost serve` on this home, with `envs` set on it.
    pub fn start(&self, envs: &[(&str, &str)]) -> Daemon {
        Daemon::start(self.home(), &[], envs)
    }

    /// The routes of `ctxhost serve` on this home, in-process.
    pub fn routes(&self) -> InProcess {
        InProcess::start(self.home())
    }

    /// `ctxhost --home <home> <args>`, which must succeed.
    pub fn ctxhost(&self, args: &[&str]) {
        super::ctxhost().arg("--home").arg(self.home()).args(args).assert().success();
    }
}
