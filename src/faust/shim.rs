//! The FaustBot compatibility shim: the Python package `faust_backend`
//! (`plugin_system` and its stubs), the worker main and the static
//! dependency reader, compiled into the binary (`build.rs` embeds
//! `src/faust/shim/` and the one JSON-RPC client,
//! `guest-examples/rpc-clients/ctxhost_rpc.py`) and written out at run time,
//! with `ctxhost_hooks.py` generated here from [`HookName::AGENT`] (the one
//! hook list: the shim reads it instead of spelling the hooks again).
//!
//! The files go to `<home>/faust/shim-<hash of their contents>/`, made in a
//! temporary sibling and renamed into place, so two ctxhost versions (or two
//! processes starting at once) never see a half-written or foreign shim.
//! This module writes files; it never runs them.

use std::borrow::Cow;
use std::path::PathBuf;

use sha2::{Digest, Sha256};

use crate::home::Home;
use crate::protocol::HookName;

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/faust_shim.rs"));
}

pub use embedded::FILES;

/// The worker main, relative to the shim dir: `python3 <shim>/<WORKER> <entry>`.
pub const WORKER: &str = "ctxhost_faust_worker.py";
/// The static reader of `register_pip_deps`: `python3 <shim>/<DEPS> <entry>`.
pub const DEPS: &str = "deps.py";

/// The module with ctxhost's agent-loop hooks, written beside the worker.
pub const HOOKS: &str = "ctxhost_hooks.py";

/// `ctxhost_hooks.py`: `AGENT_HOOKS`, the wire names of [`HookName::AGENT`] in order.
pub fn hooks_module() -> String {
    let mut text = String::from(
        "\"\"\"ctxhost's agent-loop hooks, in the order of agent-hooks.md's table.\n\n\
         Written by ctxhost (src/faust/shim.rs) from `protocol::HookName::AGENT` with the\n\
         rest of the shim: the one list, never edited by hand.\n\"\"\"\n\nAGENT_HOOKS = (\n",
    );
    for hook in HookName::AGENT {
        text.push_str(&format!("    {:?},\n", hook.as_str()));
    }
    text.push_str(")\n");
    text
}

/// Every file of the shim, (path relative to the shim dir, contents): the
/// embedded [`FILES`] and the generated [`HOOKS`].
pub fn files() -> Vec<(&'static str, Cow<'static, str>)> {
    let mut files: Vec<(&'static str, Cow<'static, str>)> =
        FILES.iter().map(|(path, content)| (*path, Cow::Borrowed(*content))).collect();
    files.push((HOOKS, Cow::Owned(hooks_module())));
    files
}

/// The shim's directory under `home`, for this build's files.
pub fn dir(home: &Home) -> PathBuf {
    let mut hash = Sha256::new();
    for (path, content) in files() {
        hash.update(path.as_bytes());
        hash.update([0]);
        hash.update(content.as_bytes());
        hash.update([0]);
    }
    home.root().join("faust").join(format!("shim-{}", &hex::encode(hash.finalize())[..16]))
}

/// Writes the shim under `home` unless it is there already; its directory.
///
/// # Errors
/// A directory or file cannot be written (the message names it).
pub fn install(home: &Home) -> Result<PathBuf, String> {
    let target = dir(home);
    if target.join(WORKER).is_file() {
        return Ok(target);
    }
    let parent = target.parent().unwrap_or(home.root()).to_owned();
    Home::ensure_dir(&parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    let staging = tempfile::Builder::new()
        .prefix(".shim-")
        .tempdir_in(&parent)
        .map_err(|e| format!("cannot create a directory in {}: {e}", parent.display()))?;
    for (rel, content) in files() {
        let path = staging.path().join(rel);
        if let Some(p) = path.parent() {
            std::fs::create_dir_all(p).map_err(|e| format!("cannot create {}: {e}", p.display()))?;
        }
        std::fs::write(&path, content.as_bytes()).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    // Readable by every hook uid (hooks run as their own uid under root).
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(staging.path(), std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("cannot open up {}: {e}", staging.path().display()))?;
    }
    match crate::home::rename_noreplace(staging.path(), &target) {
        Ok(()) => {
            // The rename moved it: nothing for the TempDir to remove.
            let _ = staging.keep();
            Ok(target)
        }
        // Another process put the same files there first.
        Err(_) if target.join(WORKER).is_file() => Ok(target),
        Err(e) => Err(format!("cannot put the shim in place at {}: {e}", target.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn installs_once_and_completely() {
        let root = tempfile::tempdir().unwrap();
        let home = Home::at(root.path());
        let dir = install(&home).unwrap();
        assert!(dir.join(WORKER).is_file() && dir.join(DEPS).is_file());
        assert!(dir.join("faust_backend/plugin_system/__init__.py").is_file());
        let client = std::fs::read_to_string(dir.join("ctxhost_rpc.py")).unwrap();
        let source = concat!(env!("CARGO_MANIFEST_DIR"), "/guest-examples/rpc-clients/ctxhost_rpc.py");
        assert_eq!(client, std::fs::read_to_string(source).unwrap(), "the one JSON-RPC client, as it is");
        assert_eq!(install(&home).unwrap(), dir, "the second install finds it");
        let entries: Vec<_> = std::fs::read_dir(dir.parent().unwrap()).unwrap().collect();
        assert_eq!(entries.len(), 1, "no staging dir left behind");
    }

    #[test]
    fn the_hook_module_lists_every_agent_hook_in_order() {
        let text = hooks_module();
        let listed: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("AGENT_HOOKS = ("))
            .skip(1)
            .take_while(|l| *l != ")")
            .map(|l| l.trim().trim_end_matches(',').trim_matches('"'))
            .collect();
        let expected: Vec<&str> = HookName::AGENT.iter().map(|h| h.as_str()).collect();
        assert_eq!(listed, expected);
        assert!(files().iter().any(|(path, content)| *path == HOOKS && content.as_ref() == text));
    }
}
