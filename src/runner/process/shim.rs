//! Seeing through version-manager shims.
//!
//! `python3` on PATH is often a pyenv or asdf shim: a shell script that costs
//! ~80-150 ms per start before the real interpreter even begins. We ask the
//! runtime, once and from the plugin's directory (so a local `.python-version`
//! applies), for its real executable and run that instead.
//!
//! The answer is cached in `<home>/cache/launchers.json`, keyed by shim,
//! plugin dir and hook environment, and stamped with the version files that
//! could change it (`.python-version`, `.tool-versions`, … in the plugin dir
//! and its ancestors, and the managers' global version files). A changed,
//! added or removed version file invalidates the entry, so a one-off
//! `ctxhost hook` pays a few `stat`s instead of the shim.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::launcher::is_executable;

/// Files whose change may change which interpreter a shim picks.
const VERSION_FILES: &[&str] = &[
    ".python-version",
    ".tool-versions",
    ".node-version",
    ".nvmrc",
    ".ruby-version",
    ".go-version",
    ".php-version",
    ".lua-version",
    "mise.toml",
    ".mise.toml",
    ".rtx.toml",
];

/// Version managers whose shims we recognise by their script text.
const MANAGERS: &[&str] = &["pyenv", "asdf", "rbenv", "nodenv", "goenv", "phpenv", "mise", "rtx", "volta"];

/// How long asking the runtime for its executable may take.
const QUERY_TIMEOUT: Duration = Duration::from_secs(10);

/// Is `program` a version-manager shim? A script (`#!`) that sits in a
/// `shims` directory or names a known manager in its first KiB.
pub fn is_shim(program: &Path) -> bool {
    let mut head = Vec::with_capacity(1024);
    let Ok(file) = std::fs::File::open(program) else { return false };
    if file.take(1024).read_to_end(&mut head).is_err() || !head.starts_with(b"#!") {
        return false;
    }
    let in_shims_dir = program.parent().and_then(Path::file_name).is_some_and(|n| n == "shims");
    let text = String::from_utf8_lossy(&head);
    // Whole words only: "promise" must not count as mise.
    let mut words = text.split(|c: char| !c.is_ascii_alphanumeric());
    in_shims_dir || words.any(|w| MANAGERS.contains(&w))
}

/// What a resolution needs: the shim, the plugin dir, the query arguments and
/// the environment hooks get (a `[env]` `PYENV_VERSION` counts).
pub struct ShimQuery<'a> {
    pub shim: &'a Path,
    pub plugin_dir: &'a Path,
    pub exe_query: &'a [&'a str],
    /// `go env GOROOT` prints a root, not the executable.
    pub append_bin: Option<&'a str>,
    pub env: &'a [(OsString, OsString)],
    pub user_home: Option<&'a Path>,
}

/// The real executable behind a shim: from the cache when its stamps still
/// match, else by asking the runtime (and caching the answer). An error says
/// why the runtime could not tell; the caller then keeps the shim.
pub fn resolve(query: &ShimQuery<'_>, cache_dir: &Path) -> Result<PathBuf, String> {
    let key = cache_key(query);
    let stamps = fingerprint(query);
    let cache_file = cache_dir.join("launchers.json");
    let mut cache = read_cache(&cache_file);
    if let Some(entry) = cache.entries.get(&key)
        && entry.stamps == stamps
        && is_executable(&entry.resolved)
    {
        return Ok(entry.resolved.clone());
    }
    let resolved = ask(query)?;
    cache.entries.insert(key, CacheEntry { resolved: resolved.clone(), stamps });
    let bytes = serde_json::to_vec_pretty(&cache).unwrap_or_default();
    if let Err(e) = crate::home::Home::write_atomic(&cache_file, &bytes) {
        tracing::debug!("could not write the launcher cache `{}`: {e}", cache_file.display());
    }
    Ok(resolved)
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct CacheFile {
    entries: BTreeMap<String, CacheEntry>,
}

#[derive(Debug, Serialize, Deserialize)]
struct CacheEntry {
    resolved: PathBuf,
    stamps: Vec<Stamp>,
}

/// An existing file's identity for invalidation: path, size, mtime.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Stamp {
    path: PathBuf,
    len: u64,
    mtime_ns: u128,
}

fn cache_key(q: &ShimQuery<'_>) -> String {
    let mut h = Sha256::new();
    for (k, v) in q.env {
        h.update(k.as_encoded_bytes());
        h.update(b"=");
        h.update(v.as_encoded_bytes());
        h.update(b"\0");
    }
    format!("{}\n{}\n{}", q.shim.display(), q.plugin_dir.display(), hex::encode(&h.finalize()[..8]))
}

fn stamp(path: &Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    let mtime_ns = meta.modified().ok()?.duration_since(UNIX_EPOCH).ok()?.as_nanos();
    Some(Stamp { path: path.to_owned(), len: meta.len(), mtime_ns })
}

/// Stamps of every version file that exists now, plus the shim itself.
fn fingerprint(q: &ShimQuery<'_>) -> Vec<Stamp> {
    let mut candidates: Vec<PathBuf> = vec![q.shim.to_owned()];
    for dir in q.plugin_dir.ancestors() {
        candidates.extend(VERSION_FILES.iter().map(|f| dir.join(f)));
    }
    if let Some(home) = q.user_home {
        let env_root = |var: &str, default: &str| {
            q.env.iter().find(|(k, _)| k == var).map(|(_, v)| PathBuf::from(v)).unwrap_or_else(|| home.join(default))
        };
        candidates.push(env_root("PYENV_ROOT", ".pyenv").join("version"));
        candidates.push(home.join(".rbenv/version"));
        candidates.push(home.join(".nodenv/version"));
        candidates.push(home.join(".goenv/version"));
        candidates.push(home.join(".tool-versions"));
        candidates.push(home.join(".config/mise/config.toml"));
    }
    candidates.sort();
    candidates.dedup();
    candidates.iter().filter_map(|p| stamp(p)).collect()
}

/// Runs the shim with the query arguments, from the plugin dir, with the
/// hook environment, bounded by [`QUERY_TIMEOUT`].
fn ask(q: &ShimQuery<'_>) -> Result<PathBuf, String> {
    let mut cmd = std::process::Command::new(q.shim);
    cmd.args(q.exe_query).env_clear().envs(q.env.iter().map(|(k, v)| (k, v))).current_dir(q.plugin_dir);
    let output = super::probe::run(&mut cmd, QUERY_TIMEOUT)?;
    let (status, out) = (output.status, String::from_utf8_lossy(&output.stdout).into_owned());
    if !status.success() {
        return Err(format!("`{} {}` failed ({status})", q.shim.display(), q.exe_query.join(" ")));
    }
    let line = out.lines().map(str::trim).rfind(|l| !l.is_empty()).unwrap_or("");
    let mut path = PathBuf::from(line);
    if let Some(bin) = q.append_bin {
        path = path.join("bin").join(bin);
    }
    if path.is_absolute() && is_executable(&path) {
        Ok(path)
    } else {
        Err(format!("`{}` answered `{line}`, which is not an executable path", q.shim.display()))
    }
}

fn read_cache(file: &Path) -> CacheFile {
    std::fs::read(file).ok().and_then(|bytes| serde_json::from_slice(&bytes).ok()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A fake shim that logs each start and prints the path of a fake
    /// interpreter chosen by the nearest `.python-version`.
    fn fake_pyenv(root: &Path) -> (PathBuf, PathBuf) {
        let shims = root.join("shims");
        std::fs::create_dir_all(&shims).unwrap();
        let real_a = root.join("real-a");
        let real_b = root.join("real-b");
        for real in [&real_a, &real_b] {
            std::fs::write(real, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(real, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let log = root.join("starts.log");
        let shim = shims.join("python3");
        std::fs::write(
            &shim,
            format!(
                "#!/bin/sh\n# pyenv shim\necho start >> {log}\nif grep -q b .python-version 2>/dev/null; then echo {b}; else echo {a}; fi\n",
                log = log.display(),
                a = real_a.display(),
                b = real_b.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
        (shim, log)
    }

    #[test]
    fn resolves_once_then_from_cache_until_a_version_file_changes() {
        let root = tempfile::tempdir().unwrap();
        let (shim, log) = fake_pyenv(root.path());
        assert!(is_shim(&shim));
        let plugin = root.path().join("plugin");
        std::fs::create_dir_all(&plugin).unwrap();
        let cache = root.path().join("cache");
        let env = [(OsString::from("PATH"), OsString::from("/usr/bin:/bin"))];
        let q = ShimQuery {
            shim: &shim,
            plugin_dir: &plugin,
            exe_query: &["-c", "x"],
            append_bin: None,
            env: &env,
            user_home: None,
        };
        let starts = || std::fs::read_to_string(&log).unwrap_or_default().lines().count();

        assert_eq!(resolve(&q, &cache).unwrap(), root.path().join("real-a"));
        assert_eq!(starts(), 1);
        assert_eq!(resolve(&q, &cache).unwrap(), root.path().join("real-a"));
        assert_eq!(starts(), 1, "second resolution must come from the cache");

        std::fs::write(plugin.join(".python-version"), "b\n").unwrap();
        assert_eq!(resolve(&q, &cache).unwrap(), root.path().join("real-b"));
        assert_eq!(starts(), 2, "a new version file invalidates the entry");
        assert_eq!(resolve(&q, &cache).unwrap(), root.path().join("real-b"));
        assert_eq!(starts(), 2);
    }

    #[test]
    fn plain_interpreters_are_not_shims() {
        let root = tempfile::tempdir().unwrap();
        let script = root.path().join("wrapper");
        std::fs::write(&script, "#!/bin/sh\nexec /usr/bin/python3 \"$@\"\n").unwrap();
        assert!(!is_shim(&script));
        assert!(!is_shim(Path::new("/bin/sh")));
    }
}
