//! `ctxhost serve --watch`: reload a stack or agent-loop plugin when its manifest, one of
//! its hook scripts or its component file changes — and only then. Plugins
//! write their own state files into their directories; those must not cause
//! reloads, so every event is checked against the files the plugin's
//! manifest names. Bursts (an editor's save, a `cp -r`) are debounced per
//! plugin.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::time::Instant;

use super::{AppState, ServeError};
use crate::manifest::Manifest;

/// Quiet time after the last relevant change before a plugin is reloaded.
const DEBOUNCE: Duration = Duration::from_millis(300);

/// Manifest file names a change to which always counts.
const MANIFESTS: [&str; 2] = ["plugin.toml", "plugin.json"];

/// Starts watching the plugins dir; the returned watcher stops when dropped.
pub(crate) fn start(state: Arc<AppState>) -> Result<notify::RecommendedWatcher, ServeError> {
    // A fresh home has no plugins dir yet; watch it from the start.
    crate::home::Home::ensure_dir(state.home.plugins_dir()).map_err(|e| ServeError::Watch(e.to_string()))?;
    let root = std::fs::canonicalize(state.home.plugins_dir())
        .map_err(|e| ServeError::Watch(format!("`{}`: {e}", state.home.plugins_dir().display())))?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<PathBuf>();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| match event {
        Ok(event) if !event.kind.is_access() => {
            for path in event.paths {
                let _ = tx.send(path);
            }
        }
        Ok(_) => {}
        Err(e) => tracing::warn!("--watch: {e}"),
    })
    .map_err(|e| ServeError::Watch(e.to_string()))?;
    watcher
        .watch(&root, RecursiveMode::Recursive)
        .map_err(|e| ServeError::Watch(format!("`{}`: {e}", root.display())))?;
    tokio::spawn(debounce_and_reload(state, root, rx));
    Ok(watcher)
}

async fn debounce_and_reload(
    state: Arc<AppState>,
    root: PathBuf,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<PathBuf>,
) {
    let mut watched: HashMap<String, HashSet<PathBuf>> = HashMap::new();
    // Stack plugins and agent-loop plugins alike — also those that failed
    // to load or start, so fixing their files brings them in.
    let agent_names: Vec<String> =
        state.catalog.entries().iter().filter(|(_, e)| e.agent_candidate).map(|(n, _)| n.clone()).collect();
    for name in state.engine.configured_names().into_iter().chain(agent_names) {
        let files = watched_files(&root.join(&name));
        watched.insert(name, files);
    }
    let mut due: HashMap<String, Instant> = HashMap::new();
    loop {
        let next = due.values().min().copied();
        tokio::select! {
            path = rx.recv() => {
                let Some(path) = path else { return };
                if let Some(name) = relevant(&root, &path, &watched) {
                    due.insert(name, Instant::now() + DEBOUNCE);
                }
            }
            _ = sleep_until(next) => {
                let now = Instant::now();
                let ready: Vec<String> = due.iter().filter(|(_, t)| **t <= now).map(|(n, _)| n.clone()).collect();
                for name in ready {
                    due.remove(&name);
                    match super::reload::reload(&state, &name).await {
                        Ok(done) => tracing::info!(plugin = %name, version = %done.version, "--watch: reloaded"),
                        Err(e) => tracing::warn!(plugin = %name, "--watch: not reloaded, the running version stays: {e}"),
                    }
                    watched.insert(name.clone(), watched_files(&root.join(&name)));
                }
            }
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// The watched plugin a change to `path` should reload, if any.
fn relevant(root: &Path, path: &Path, watched: &HashMap<String, HashSet<PathBuf>>) -> Option<String> {
    let rel = path.strip_prefix(root).ok()?;
    let mut parts = rel.components();
    let name = parts.next()?.as_os_str().to_str()?;
    let files = watched.get(name)?;
    let rest = parts.as_path();
    // The plugin's directory itself: replaced whole (`plugin install --force`
    // swaps it, `rm -r` + `cp -r` recreates it).
    let whole_dir = rest.as_os_str().is_empty();
    let is_manifest = rest.to_str().is_some_and(|r| MANIFESTS.contains(&r));
    (whole_dir || is_manifest || files.contains(path)).then(|| name.to_owned())
}

/// The files of the plugin in `dir` whose change means new code: its hook
/// scripts and its component (canonical paths, as the manifest resolves them).
fn watched_files(dir: &Path) -> HashSet<PathBuf> {
    if crate::faust::is_faust_plugin(dir) {
        // A FaustBot plugin's code: its entry and sibling modules, and its
        // requirements (its data lives elsewhere or in subdirectories).
        let Ok(entries) = std::fs::read_dir(dir) else { return HashSet::new() };
        return entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "py") || p.ends_with("requirements.txt"))
            .filter_map(|p| p.canonicalize().ok())
            .collect();
    }
    let lookup = |var: &str| std::env::var(var).ok();
    match Manifest::load_with_env(dir, &lookup) {
        Ok(loaded) => {
            let m = loaded.manifest;
            m.hooks.values().map(|h| h.path.clone()).chain(m.component.map(|c| c.path)).collect()
        }
        // A broken manifest: only a change to the manifest itself matters.
        Err(_) => HashSet::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_manifests_and_named_files_are_relevant() {
        let root = Path::new("/p");
        let mut watched = HashMap::new();
        watched.insert("notes".to_owned(), HashSet::from([PathBuf::from("/p/notes/hooks/ingest.py")]));
        let r = |p: &str| relevant(root, Path::new(p), &watched);
        assert_eq!(r("/p/notes/plugin.toml").as_deref(), Some("notes"));
        assert_eq!(r("/p/notes").as_deref(), Some("notes"), "the directory replaced whole");
        assert_eq!(r("/p/notes/hooks/ingest.py").as_deref(), Some("notes"));
        assert_eq!(r("/p/notes/state.json"), None, "a plugin's own state file");
        assert_eq!(r("/p/notes/hooks/plugin.toml"), None, "only the manifest at the plugin's root");
        assert_eq!(r("/p/other/plugin.toml"), None, "not in the stack");
        assert_eq!(r("/elsewhere/notes/plugin.toml"), None);
    }
}
