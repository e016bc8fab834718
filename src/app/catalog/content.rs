//! A plugin's content hash: one SHA-256 over the files that define what it
//! does, so instances on one shared store can tell whether they run the same
//! version of a plugin (the fleet's version is recorded in the store;
//! [`super::fleet`] compares).
//!
//! Which files: the manifest always (`plugin.toml` or `plugin.json`). A wasm
//! plugin (`runtime = "wasm"`) runs only what its manifest names, so its
//! hash covers the manifest, the `component` file and each hook's module —
//! not the sources or build tree beside them. Every other kind (scripts,
//! workers, FaustBot) may import any code file of its directory, so its
//! hash covers the code below the directory: the manifest, the hook paths
//! `[hooks]` names, every executable file, and every file with a code
//! extension ([`CODE`]: `.py`, `.js`, `.sh`, `.wasm`, …) — not data a
//! plugin may write beside its code (`log.jsonl`, a cache, a database),
//! which would otherwise make each instance's version its own. Names
//! starting with `.` (`.git`, editors' swap files, install staging) and
//! `__pycache__` directories are left out. A symbolic link counts as its target's
//! text (never followed); its executable bit counts with each file (it
//! decides how a script starts); modification times and the order a
//! directory lists its entries do not.
//!
//! The digest: for each file in the order of its relative path's bytes,
//! a kind tag, the path and the content, each length-prefixed, so no two
//! trees give the same stream. Shown as `sha256:<hex>`.
//!
//! Reads only through [`crate::manifest::beneath`] (beneath the plugin dir,
//! never through a link, regular files only, capped); never writes, never
//! runs anything, and never puts a file's bytes in an error.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::manifest::MANIFEST_FILE;
use crate::manifest::beneath::{BeneathError, EntryKind, Root};

/// Bytes hashed per plugin at most: a tree larger than this is refused.
pub const MAX_BYTES: u64 = 256 * 1024 * 1024;
/// Files hashed per plugin at most.
pub const MAX_FILES: usize = 20_000;
/// The extensions of code files: what a script plugin's hooks may run or
/// import (its data files are not its version).
pub const CODE: &[&str] = &[
    "py", "js", "mjs", "cjs", "ts", "mts", "cts", "sh", "bash", "rb", "lua", "php", "go", "v", "pl", "pm", "tcl",
    "wasm", "so", "jar", "class", "r", "jl", "ex", "exs", "rs", "c", "h", "cc", "cpp",
];

/// Directories deep at most.
const MAX_DEPTH: usize = 32;

/// Why a plugin's content hash could not be computed.
#[derive(Debug, thiserror::Error)]
pub enum ContentError {
    #[error("{0}")]
    Read(#[from] BeneathError),
    #[error("`{}`: more than {limit} {what} to hash", dir.display())]
    TooLarge { dir: PathBuf, what: &'static str, limit: u64 },
    #[error("`{}`: {reason}", path.display())]
    Manifest { path: PathBuf, reason: String },
}

/// One file of the hashed set.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Item {
    File { executable: bool },
    Link,
}

/// The content hash of the plugin in `dir` (`sha256:<hex>`).
///
/// # Errors
/// A file that cannot be read beneath the dir (a link where a file is
/// named, a FIFO, too large), a tree over [`MAX_FILES`] files or
/// [`MAX_BYTES`] bytes, or a wasm plugin's manifest that does not parse.
pub fn content_hash(dir: &Path) -> Result<String, ContentError> {
    let root = Root::open(dir)?;
    let files = match wasm_files(&root)? {
        Some(named) => named,
        None => tree(&root, &named_by_manifest(&root))?,
    };
    let mut hasher = Sha256::new();
    let mut total = 0u64;
    for (rel, item) in &files {
        let path = rel.as_os_str().as_bytes();
        match item {
            Item::File { executable } => {
                let budget = MAX_BYTES - total;
                let bytes = root.read(rel, budget).map_err(|e| match e.reason {
                    crate::manifest::beneath::Refusal::TooLarge { .. } => {
                        ContentError::TooLarge { dir: dir.to_owned(), what: "bytes", limit: MAX_BYTES }
                    }
                    _ => ContentError::Read(e),
                })?;
                total += bytes.len() as u64;
                field(&mut hasher, if *executable { b"x" } else { b"f" });
                field(&mut hasher, path);
                field(&mut hasher, &bytes);
            }
            Item::Link => {
                let target = root.read_link(rel)?;
                field(&mut hasher, b"l");
                field(&mut hasher, path);
                field(&mut hasher, target.as_os_str().as_bytes());
            }
        }
    }
    Ok(format!("sha256:{}", hex::encode(hasher.finalize())))
}

/// One length-prefixed field of the digest's stream.
fn field(hasher: &mut Sha256, bytes: &[u8]) {
    hasher.update((bytes.len() as u64).to_le_bytes());
    hasher.update(bytes);
}

/// For a wasm plugin (plugin.toml's `runtime = "wasm"`, in `[hooks]` or at
/// the top): the manifest, its `component` and its hooks' modules. `None`
/// for every other kind.
fn wasm_files(root: &Root) -> Result<Option<BTreeMap<PathBuf, Item>>, ContentError> {
    let manifest = Path::new(MANIFEST_FILE);
    let text = match root.read_to_string(manifest, crate::manifest::beneath::MANIFEST_LIMIT) {
        Ok(text) => text,
        Err(e) if e.reason.is_not_found() => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let Ok(table) = toml::from_str::<toml::Table>(&text) else {
        // Not our concern here: the load says what is wrong; the whole
        // tree stands for it meanwhile.
        return Ok(None);
    };
    let hooks = table.get("hooks").and_then(toml::Value::as_table);
    let runtime = hooks.and_then(|h| h.get("runtime")).or_else(|| table.get("runtime")).and_then(|v| v.as_str());
    if runtime != Some("wasm") {
        return Ok(None);
    }
    let mut files = BTreeMap::from([(manifest.to_owned(), Item::File { executable: false })]);
    let hook_names: Vec<&str> = crate::protocol::HookName::ALL.iter().map(|h| h.as_str()).collect();
    let named = table.get("component").and_then(|v| v.as_str()).into_iter().chain(
        hooks.into_iter().flatten().filter(|(k, _)| hook_names.contains(&k.as_str())).filter_map(|(_, v)| v.as_str()),
    );
    for rel in named {
        let rel = normal(rel).ok_or_else(|| ContentError::Manifest {
            path: root.path().join(MANIFEST_FILE),
            reason: format!("`{rel}` leaves the plugin directory"),
        })?;
        files.insert(rel, Item::File { executable: false });
    }
    Ok(Some(files))
}

/// The manifest files and the hook paths plugin.toml's `[hooks]` names
/// (read leniently: what does not parse names nothing more).
fn named_by_manifest(root: &Root) -> std::collections::BTreeSet<PathBuf> {
    let mut named: std::collections::BTreeSet<PathBuf> =
        [MANIFEST_FILE, crate::faust::PLUGIN_JSON].iter().map(PathBuf::from).collect();
    let table = root
        .read_to_string(Path::new(MANIFEST_FILE), crate::manifest::beneath::MANIFEST_LIMIT)
        .ok()
        .and_then(|t| toml::from_str::<toml::Table>(&t).ok());
    let hook_names: Vec<&str> = crate::protocol::HookName::ALL.iter().map(|h| h.as_str()).collect();
    if let Some(hooks) = table.as_ref().and_then(|t| t.get("hooks")).and_then(toml::Value::as_table) {
        for (key, value) in hooks {
            if let (true, Some(rel)) = (hook_names.contains(&key.as_str()), value.as_str().and_then(normal)) {
                named.insert(rel);
            }
        }
    }
    named
}

/// Whether `rel` is code (see [`CODE`]).
fn is_code(rel: &Path, executable: bool, named: &std::collections::BTreeSet<PathBuf>) -> bool {
    executable
        || named.contains(rel)
        || rel.extension().and_then(|e| e.to_str()).is_some_and(|e| CODE.iter().any(|c| c.eq_ignore_ascii_case(e)))
}

/// `rel` without `.` components; `None` when it is absolute or has `..`.
fn normal(rel: &str) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in Path::new(rel).components() {
        match c {
            std::path::Component::Normal(n) => out.push(n),
            std::path::Component::CurDir => {}
            _ => return None,
        }
    }
    Some(out)
}

/// Every file below `root` (see the module doc for what is left out), by
/// relative path.
fn tree(root: &Root, named: &std::collections::BTreeSet<PathBuf>) -> Result<BTreeMap<PathBuf, Item>, ContentError> {
    let mut files = BTreeMap::new();
    let mut pending: Vec<(PathBuf, usize)> = vec![(PathBuf::new(), 0)];
    while let Some((rel_dir, depth)) = pending.pop() {
        let dir = if rel_dir.as_os_str().is_empty() { None } else { Some(root.sub_dir(&rel_dir)?) };
        let entries = dir.as_ref().unwrap_or(root).list()?;
        for (name, kind) in entries {
            if skipped(&name, kind) {
                continue;
            }
            let rel = rel_dir.join(&name);
            match kind {
                EntryKind::File { executable } => {
                    if is_code(&rel, executable, named) {
                        files.insert(rel, Item::File { executable });
                    }
                }
                EntryKind::Symlink => {
                    if is_code(&rel, false, named) {
                        files.insert(rel, Item::Link);
                    }
                }
                EntryKind::Dir if depth + 1 < MAX_DEPTH => pending.push((rel, depth + 1)),
                EntryKind::Dir => {
                    return Err(ContentError::TooLarge {
                        dir: root.path().to_owned(),
                        what: "directory levels",
                        limit: MAX_DEPTH as u64,
                    });
                }
                EntryKind::Other if !is_code(&rel, false, named) => {}
                EntryKind::Other => {
                    return Err(BeneathError {
                        path: root.path().join(rel),
                        reason: crate::manifest::beneath::Refusal::NotAFile,
                    }
                    .into());
                }
            }
            if files.len() > MAX_FILES {
                return Err(ContentError::TooLarge {
                    dir: root.path().to_owned(),
                    what: "files",
                    limit: MAX_FILES as u64,
                });
            }
        }
    }
    Ok(files)
}

/// Hidden names and python's caches are not part of a plugin's version.
fn skipped(name: &OsString, kind: EntryKind) -> bool {
    name.as_bytes().starts_with(b".") || (kind == EntryKind::Dir && name == "__pycache__")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{PermissionsExt, symlink};

    fn plugin(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (rel, text) in files {
            let path = dir.path().join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        dir
    }

    const SCRIPT: &[(&str, &str)] = &[
        ("plugin.toml", "name = \"p\"\nversion = \"1\"\n[hooks]\nruntime = \"bash\"\ningest = \"hooks/ingest.sh\"\n"),
        ("hooks/ingest.sh", "echo '{\"type\":\"ingest_result\",\"memories\":[]}'\n"),
        ("hooks/lib/helper.sh", "x=1\n"),
    ];

    #[test]
    fn one_changed_byte_changes_it() {
        let a = plugin(SCRIPT);
        let b = plugin(SCRIPT);
        let h = content_hash(a.path()).unwrap();
        assert!(h.starts_with("sha256:") && h.len() == 7 + 64, "{h}");
        assert_eq!(h, content_hash(b.path()).unwrap(), "same files, same hash, wherever they are");
        std::fs::write(b.path().join("hooks/lib/helper.sh"), "x=2\n").unwrap();
        assert_ne!(h, content_hash(b.path()).unwrap(), "a helper the hook may source counts");
        std::fs::write(b.path().join("hooks/lib/helper.sh"), "x=1\n").unwrap();
        assert_eq!(h, content_hash(b.path()).unwrap());
        // A file moved to another name with the same bytes is another version.
        std::fs::rename(b.path().join("hooks/lib/helper.sh"), b.path().join("hooks/lib/helper2.sh")).unwrap();
        assert_ne!(h, content_hash(b.path()).unwrap());
        std::fs::rename(b.path().join("hooks/lib/helper2.sh"), b.path().join("hooks/lib/helper.sh")).unwrap();
        // The executable bit decides how a script starts.
        std::fs::set_permissions(b.path().join("hooks/ingest.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_ne!(h, content_hash(b.path()).unwrap());
    }

    #[test]
    fn a_hook_path_without_a_code_extension_counts() {
        let a = plugin(&[
            ("plugin.toml", "name = \"p\"\n[hooks]\nruntime = \"bash\"\ningest = \"./hooks/ingest\"\n"),
            ("hooks/ingest", "echo one\n"),
        ]);
        let h = content_hash(a.path()).unwrap();
        std::fs::write(a.path().join("hooks/ingest"), "echo two\n").unwrap();
        assert_ne!(h, content_hash(a.path()).unwrap());
    }

    #[test]
    fn order_times_caches_and_hidden_files_do_not_count() {
        let a = plugin(SCRIPT);
        // The same files written in another order, at other times.
        let mut reversed: Vec<_> = SCRIPT.to_vec();
        reversed.reverse();
        let b = plugin(&reversed);
        let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        std::fs::File::options().write(true).open(b.path().join("hooks/ingest.sh")).unwrap().set_modified(old).unwrap();
        std::fs::create_dir_all(b.path().join("hooks/__pycache__")).unwrap();
        std::fs::write(b.path().join("hooks/__pycache__/x.pyc"), "cache").unwrap();
        std::fs::write(b.path().join(".ingest.sh.swp"), "editor").unwrap();
        // Data a plugin writes beside its code is not its version.
        std::fs::write(b.path().join("log.jsonl"), "{\"called\":1}\n").unwrap();
        std::fs::write(b.path().join("hooks/state.json"), "{}").unwrap();
        std::fs::create_dir_all(b.path().join(".git")).unwrap();
        std::fs::write(b.path().join(".git/HEAD"), "ref").unwrap();
        assert_eq!(content_hash(a.path()).unwrap(), content_hash(b.path()).unwrap());
    }

    #[test]
    fn links_count_as_their_target_and_are_never_followed() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "one").unwrap();
        let a = plugin(SCRIPT);
        symlink(outside.path().join("secret"), a.path().join("hooks/link.sh")).unwrap();
        let h = content_hash(a.path()).unwrap();
        std::fs::write(outside.path().join("secret"), "two").unwrap();
        assert_eq!(h, content_hash(a.path()).unwrap(), "the file outside is not read");
        std::fs::remove_file(a.path().join("hooks/link.sh")).unwrap();
        symlink("ingest.sh", a.path().join("hooks/link.sh")).unwrap();
        assert_ne!(h, content_hash(a.path()).unwrap(), "another target is another version");
    }

    #[test]
    fn a_wasm_plugin_is_its_manifest_and_the_modules_it_names() {
        let a = plugin(&[
            ("plugin.toml", "name = \"w\"\ncomponent = \"target/w.wasm\"\n[hooks]\nruntime = \"wasm\"\n"),
            ("target/w.wasm", "\0asm one"),
            ("target/debug/build.log", "noise"),
            ("src/lib.rs", "fn main() {}"),
        ]);
        let h = content_hash(a.path()).unwrap();
        std::fs::write(a.path().join("src/lib.rs"), "fn main() { edited }").unwrap();
        std::fs::write(a.path().join("target/debug/build.log"), "other noise").unwrap();
        assert_eq!(h, content_hash(a.path()).unwrap(), "sources and build output are not what runs");
        std::fs::write(a.path().join("target/w.wasm"), "\0asm two").unwrap();
        assert_ne!(h, content_hash(a.path()).unwrap(), "the component is");
        std::fs::remove_file(a.path().join("target/w.wasm")).unwrap();
        let e = content_hash(a.path()).unwrap_err();
        assert!(e.to_string().contains("target/w.wasm"), "{e}");
    }

    #[test]
    fn a_fifo_among_the_code_is_refused_not_read() {
        let a = plugin(SCRIPT);
        let data = std::ffi::CString::new(a.path().join("hooks/data").as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(data.as_ptr(), 0o600) }, 0);
        content_hash(a.path()).unwrap();
        let fifo = std::ffi::CString::new(a.path().join("hooks/pipe.py").as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let e = content_hash(a.path()).unwrap_err();
        assert!(e.to_string().contains("hooks/pipe.py"), "{e}");
    }
}
