//! The environment of a hook process (spec section 6): cleared, then filled
//! in a fixed order where later entries win. Nothing else of the host's
//! environment may reach a hook.
//!
//! Order: `LIBREFANG_AGENT_ID`, `LIBREFANG_MESSAGE`, `LIBREFANG_RUNTIME`;
//! `PATH`, `HOME` (the hook home inside ctxhost's home, never the user's:
//! see [`crate::host::LoadContext::hook_home`]); the runtime's passthrough variables; the host's
//! `allowed_env_vars`; with the filesystem confined, the runtime's caches
//! moved into the plugin's data dir (`GOCACHE`, `GOPATH`, `GOMODCACHE`,
//! `npm_config_cache`, `DENO_DIR`, …); a python plugin's virtual environment (`VIRTUAL_ENV`,
//! its `bin` first on `PATH`); the plugin's `[env]`; bootstrap `env_overrides` (never
//! over `[env]`); `LIBREFANG_PLUGIN_CONFIG`; `LIBREFANG_MAX_MEMORY_MB`; with
//! network denied, the proxy variables and `LIBREFANG_SANDBOX=1`; last the
//! per-call `TMPDIR`, which the host owns.
//!
//! Everything that does not change per call is computed once, at load.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;

use crate::manifest::{Manifest, valid_env_name};
use crate::protocol::HookRequest;

type Pairs = Vec<(OsString, OsString)>;

/// `LIBREFANG_MESSAGE` is cut to this many bytes (on a char boundary): Linux
/// refuses to start a process with one variable over 128 KiB (E2BIG), and the
/// whole message is in the request on stdin anyway.
pub const MAX_ENV_MESSAGE: usize = 32 * 1024;

fn env_message(message: &str) -> &str {
    if message.len() <= MAX_ENV_MESSAGE {
        return message;
    }
    let mut end = MAX_ENV_MESSAGE;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    &message[..end]
}

/// The per-plugin part of the hook environment, computed once.
#[derive(Debug, Clone, Default)]
pub struct EnvPlan {
    runtime_label: OsString,
    /// PATH, HOME, passthrough, allowed vars, `[env]`.
    base: Pairs,
    /// Keys of `[env]`: bootstrap overrides may not replace them.
    plugin_keys: Vec<String>,
    /// Config file, memory limit, network-denied variables.
    tail: Pairs,
}

/// What the plan is made from.
pub struct EnvInputs<'a> {
    pub manifest: &'a Manifest,
    pub passthrough: &'a [&'a str],
    pub allowed_env_vars: &'a [String],
    pub config_file: Option<&'a Path>,
    /// The plugin's virtual environment, when its hooks run in one.
    pub venv: Option<&'a Path>,
    /// Where the runtime's caches go when the filesystem is confined (the
    /// plugin's data dir); `None` leaves them where the runtime puts them.
    pub cache_dir: Option<&'a Path>,
    /// The hook's `HOME` (`None`: the host's, for a plan that never runs a
    /// hook).
    pub home: Option<&'a Path>,
    pub host: &'a dyn Fn(&str) -> Option<OsString>,
}

impl EnvPlan {
    pub fn new(i: EnvInputs<'_>) -> EnvPlan {
        let settings = &i.manifest.settings;
        let mut base = Pairs::new();
        let mut from_host = |name: &str, hook_value: Option<&Path>| {
            if let Some(v) = hook_value.map(OsString::from).or_else(|| (i.host)(name)) {
                base.push((name.into(), v));
            }
        };
        from_host("PATH", None);
        from_host("HOME", i.home);
        i.passthrough.iter().for_each(|n| from_host(n, None));
        i.allowed_env_vars.iter().filter(|n| valid_env_name(n)).for_each(|n| from_host(n, None));
        if let Some(dir) = i.cache_dir {
            base.extend(runtime_caches(&settings.runtime, dir));
        }
        if let Some(venv) = i.venv {
            // What `activate` does: the environment's bin first on PATH.
            let bin = venv.join("bin");
            let path = match (i.host)("PATH") {
                Some(host) => std::env::join_paths(std::iter::once(bin.clone()).chain(std::env::split_paths(&host)))
                    .unwrap_or_else(|_| bin.clone().into_os_string()),
                None => bin.into_os_string(),
            };
            base.push(("VIRTUAL_ENV".into(), venv.into()));
            base.push(("PATH".into(), path));
        }
        base.extend(i.manifest.env.iter().map(|(k, v)| (k.into(), v.into())));

        let mut tail = Pairs::new();
        if let Some(file) = i.config_file {
            tail.push(("LIBREFANG_PLUGIN_CONFIG".into(), file.into()));
        }
        if let Some(mb) = settings.max_memory_mb {
            tail.push(("LIBREFANG_MAX_MEMORY_MB".into(), mb.to_string().into()));
        }
        if !settings.allow_network {
            for (k, v) in [
                ("no_proxy", "*"),
                ("NO_PROXY", "*"),
                ("http_proxy", ""),
                ("https_proxy", ""),
                ("HTTP_PROXY", ""),
                ("HTTPS_PROXY", ""),
                ("LIBREFANG_SANDBOX", "1"),
            ] {
                tail.push((k.into(), v.into()));
            }
        }
        EnvPlan {
            runtime_label: i.manifest.settings.runtime.label().into(),
            base,
            plugin_keys: i.manifest.env.keys().cloned().collect(),
            tail,
        }
    }

    /// Bootstrap overrides that may apply: not over `[env]`, and not the
    /// host-owned `LIBREFANG_*` and `TMPDIR`. Returns the kept ones and a
    /// warning per refused key.
    pub fn filter_overrides(&self, overrides: BTreeMap<String, String>) -> (BTreeMap<String, String>, Vec<String>) {
        let mut warnings = Vec::new();
        let kept = overrides
            .into_iter()
            .filter(|(k, _)| {
                let reason = if !valid_env_name(k) {
                    Some("it is not a valid variable name")
                } else if self.plugin_keys.contains(k) {
                    Some("it is set by the plugin's [env]")
                } else if k.starts_with("LIBREFANG_") || k == "TMPDIR" {
                    Some("the host sets it")
                } else {
                    None
                };
                if let Some(reason) = reason {
                    warnings.push(format!("bootstrap env_overrides: `{k}` is ignored because {reason}"));
                }
                reason.is_none()
            })
            .collect();
        (kept, warnings)
    }

    /// The full environment of one call, in order (later entries win).
    pub fn for_call(&self, request: &HookRequest, overrides: &BTreeMap<String, String>, tmpdir: &Path) -> Pairs {
        let mut env = Pairs::with_capacity(4 + self.base.len() + overrides.len() + self.tail.len());
        env.push(("LIBREFANG_AGENT_ID".into(), request.agent_id().unwrap_or("").into()));
        env.push(("LIBREFANG_MESSAGE".into(), env_message(request.message().unwrap_or("")).into()));
        env.push(("LIBREFANG_RUNTIME".into(), self.runtime_label.clone()));
        env.extend(self.base.iter().cloned());
        env.extend(overrides.iter().map(|(k, v)| (k.into(), v.into())));
        env.extend(self.tail.iter().cloned());
        env.push(("TMPDIR".into(), tmpdir.into()));
        env
    }

    /// PATH, HOME, passthrough, allowed vars and `[env]`: what a launcher
    /// query (shim resolution) runs with.
    pub fn base(&self) -> &[(OsString, OsString)] {
        &self.base
    }
}

/// The cache variables of a runtime, pointed into `dir` (a confined hook
/// cannot write `~/.cache`, `~/go` or `~/.npm`).
fn runtime_caches(runtime: &crate::manifest::Runtime, dir: &Path) -> Pairs {
    use crate::manifest::Runtime;
    let at = |k: &str, sub: &str| (OsString::from(k), dir.join(sub).into_os_string());
    match runtime {
        Runtime::Go => vec![at("GOCACHE", "cache/go-build"), at("GOPATH", "go"), at("GOMODCACHE", "go/pkg/mod")],
        Runtime::Node => vec![at("npm_config_cache", "cache/npm")],
        Runtime::Deno => vec![at("DENO_DIR", "cache/deno")],
        Runtime::Bun => vec![at("BUN_INSTALL_CACHE_DIR", "cache/bun"), at("XDG_CACHE_HOME", "cache")],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{HookName, HookRequest};
    use std::path::PathBuf;

    fn plan(env_toml: &str, allow_network: bool) -> (tempfile::TempDir, EnvPlan) {
        let dir = tempfile::tempdir().unwrap();
        let plugin = dir.path().join("p");
        std::fs::create_dir_all(&plugin).unwrap();
        std::fs::write(
            plugin.join("plugin.toml"),
            format!(
                "name = \"p\"\nversion = \"1\"\nallow_network = {allow_network}\nmax_memory_mb = 5\n[env]\n{env_toml}\n"
            ),
        )
        .unwrap();
        let manifest = Manifest::load_with_env(&plugin, &|_| None).unwrap().manifest;
        let host = |k: &str| match k {
            "PATH" => Some(OsString::from("/host/bin")),
            "HOME" => Some(OsString::from("/home/u")),
            "PYTHONPATH" => Some(OsString::from("/host/py")),
            "LANG" => Some(OsString::from("C.UTF-8")),
            _ => None,
        };
        let allowed = vec!["LANG".to_owned(), "BAD=NAME".to_owned()];
        let plan = EnvPlan::new(EnvInputs {
            manifest: &manifest,
            passthrough: &["PYTHONPATH"],
            allowed_env_vars: &allowed,
            config_file: Some(Path::new("/cfg.json")),
            venv: None,
            cache_dir: None,
            home: Some(Path::new("/ctx/hook-home")),
            host: &host,
        });
        (dir, plan)
    }

    fn names(env: &[(OsString, OsString)]) -> Vec<String> {
        env.iter().map(|(k, _)| k.to_string_lossy().into_owned()).collect()
    }

    /// What a process started with `env` sees: later entries win.
    fn effective(env: &[(OsString, OsString)], key: &str) -> Option<String> {
        env.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.to_string_lossy().into_owned())
    }

    #[test]
    fn the_spec_order_with_later_entries_winning() {
        let (_d, plan) = plan("PYTHONPATH = \"/plugin/py\"\nFROM_ENV = \"1\"", false);
        let req =
            HookRequest::from_json(HookName::Ingest, serde_json::json!({"agent_id": "a", "message": "m"})).unwrap();
        let overrides = BTreeMap::from([("EXTRA".to_owned(), "o".to_owned())]);
        let env = plan.for_call(&req, &overrides, &PathBuf::from("/tmp/call"));
        assert_eq!(
            names(&env),
            [
                "LIBREFANG_AGENT_ID",
                "LIBREFANG_MESSAGE",
                "LIBREFANG_RUNTIME",
                "PATH",
                "HOME",
                "PYTHONPATH",
                "LANG",
                "FROM_ENV",
                "PYTHONPATH",
                "EXTRA",
                "LIBREFANG_PLUGIN_CONFIG",
                "LIBREFANG_MAX_MEMORY_MB",
                "no_proxy",
                "NO_PROXY",
                "http_proxy",
                "https_proxy",
                "HTTP_PROXY",
                "HTTPS_PROXY",
                "LIBREFANG_SANDBOX",
                "TMPDIR",
            ]
        );
        assert_eq!(effective(&env, "PYTHONPATH").as_deref(), Some("/plugin/py"), "[env] over passthrough");
        assert_eq!(effective(&env, "LIBREFANG_AGENT_ID").as_deref(), Some("a"));
        assert_eq!(effective(&env, "LIBREFANG_MESSAGE").as_deref(), Some("m"));
        assert_eq!(effective(&env, "LIBREFANG_MAX_MEMORY_MB").as_deref(), Some("5"));
        assert_eq!(effective(&env, "TMPDIR").as_deref(), Some("/tmp/call"));
        assert_eq!(effective(&env, "HOME").as_deref(), Some("/ctx/hook-home"), "the hook home, not the user's");
    }

    #[test]
    fn bootstrap_overrides_never_replace_env_or_host_variables() {
        let (_d, plan) = plan("KEEP = \"plugin\"", true);
        let (kept, warnings) = plan.filter_overrides(BTreeMap::from([
            ("KEEP".to_owned(), "bootstrap".to_owned()),
            ("NEW".to_owned(), "v".to_owned()),
            ("LIBREFANG_AGENT_ID".to_owned(), "x".to_owned()),
            ("TMPDIR".to_owned(), "/elsewhere".to_owned()),
            ("TMPDIR=/x".to_owned(), "y".to_owned()),
            ("PATH".to_owned(), "/boot/bin".to_owned()),
        ]));
        assert_eq!(kept.keys().collect::<Vec<_>>(), ["NEW", "PATH"]);
        assert_eq!(warnings.len(), 4, "{warnings:?}");
        let req = HookRequest::from_json(HookName::Ingest, serde_json::json!({})).unwrap();
        let env = plan.for_call(&req, &kept, &PathBuf::from("/t"));
        assert_eq!(effective(&env, "PATH").as_deref(), Some("/boot/bin"), "overrides come after the host's PATH");
        assert_eq!(effective(&env, "KEEP").as_deref(), Some("plugin"));
        assert!(effective(&env, "LIBREFANG_SANDBOX").is_none(), "network allowed");
        assert!(effective(&env, "BAD=NAME").is_none(), "invalid allowed_env_vars names are skipped");
    }

    #[test]
    fn long_messages_are_cut_on_a_char_boundary() {
        assert_eq!(env_message("short"), "short");
        let long = format!("a{}", "é".repeat(MAX_ENV_MESSAGE));
        let cut = env_message(&long);
        assert!(cut.len() <= MAX_ENV_MESSAGE && cut.len() >= MAX_ENV_MESSAGE - 1);
        assert!(long.starts_with(cut));
    }
}
