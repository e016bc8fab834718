//! The state files of the JSON-file layout, imported into a [`Store`] at its
//! first open: `<home>/agent/vfs.json`, `<home>/agent/triggers.json`,
//! `<home>/agent/plugins/<name>/agent_config.json` and `agent_storage.json`,
//! `<home>/plugins-state.toml`; into a PostgreSQL store also `<home>/grants.toml`
//! (a SQLite home keeps its grants in that file, `host::grants`).
//!
//! All the files found are read first. A shared one (vfs, triggers, plugins
//! state) that cannot be read or parsed fails the open, naming it and the
//! reason, and nothing is imported or renamed; a plugin's own one that cannot
//! is left where it is and fails that plugin's load instead ([`plugin`], as
//! a broken state file of one plugin always did). No file is ever
//! overwritten. The rest are imported in one transaction, each recorded by
//! its path (relative to the home) so it is imported at most once, and
//! renamed to `<file>.migrated` — never deleted. A rename that fails is
//! retried at the next open, without a second import.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Map, Value};

use super::{ImportFile, Node, Store, StoreError, StoreErrorKind, TriggerRecord};
use crate::home::Home;

/// What an old file held.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Vfs,
    Triggers,
    Config(String),
    Storage(String),
    PluginsState,
    Grants,
}

/// One old state file found in the home.
#[derive(Debug, Clone)]
struct Legacy {
    file: PathBuf,
    kind: Kind,
}

fn legacy_error(file: &Path, reason: impl ToString) -> StoreError {
    StoreError::new(
        "host",
        "migrate",
        StoreErrorKind::Legacy { file: file.to_owned(), reason: reason.to_string().trim_end().to_owned() },
    )
}

impl Kind {
    /// A plugin's own file (its failure is the plugin's, not the store's).
    fn plugin(&self) -> Option<&str> {
        match self {
            Kind::Config(name) | Kind::Storage(name) => Some(name),
            _ => None,
        }
    }
}

/// `plugin`'s own old files that are present.
fn plugin_files(home: &Home, plugin: &str) -> Vec<Legacy> {
    let dir = home.agent_dir().join("plugins").join(plugin);
    [
        (dir.join("agent_config.json"), Kind::Config(plugin.to_owned())),
        (dir.join("agent_storage.json"), Kind::Storage(plugin.to_owned())),
    ]
    .into_iter()
    .filter(|(file, _)| file.is_file())
    .map(|(file, kind)| Legacy { file, kind })
    .collect()
}

/// The old files present in `home` (with `grants`, `grants.toml` too).
fn find(home: &Home, grants: bool) -> Result<Vec<Legacy>, StoreError> {
    let agent = home.agent_dir();
    let mut found = Vec::new();
    let mut add = |file: PathBuf, kind: Kind| {
        if file.is_file() {
            found.push(Legacy { file, kind });
        }
    };
    add(agent.join("vfs.json"), Kind::Vfs);
    add(agent.join("triggers.json"), Kind::Triggers);
    add(home.state_file(), Kind::PluginsState);
    if grants {
        add(home.grants_file(), Kind::Grants);
    }
    let plugins = agent.join("plugins");
    let entries = match std::fs::read_dir(&plugins) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
        Err(e) => return Err(legacy_error(&plugins, e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| legacy_error(&plugins, e))?;
        match entry.file_name().into_string() {
            Ok(name) => names.push(name),
            Err(name) => tracing::warn!("{}: {name:?} is not a plugin name; left alone", plugins.display()),
        }
    }
    names.sort();
    for name in names {
        found.extend(plugin_files(home, &name));
    }
    Ok(found)
}

/// Whether `home` holds any old state file.
pub fn has_legacy_files(home: &Home) -> bool {
    find(home, false).is_ok_and(|f| !f.is_empty())
}

/// A trigger as `triggers.json` kept it.
#[derive(Deserialize)]
struct OldTrigger {
    trigger: Map<String, Value>,
    created: u64,
    fired: Option<u64>,
}

/// One agent's storage spaces as `agent_storage.json` kept them.
#[derive(Default, Deserialize)]
struct OldSpaces {
    #[serde(default)]
    global: BTreeMap<String, Value>,
    #[serde(default)]
    sessions: BTreeMap<String, BTreeMap<String, Value>>,
}

/// `plugins-state.toml`.
#[derive(Default, Deserialize)]
struct OldState {
    #[serde(default)]
    disabled: BTreeSet<String>,
    #[serde(default)]
    enabled: BTreeSet<String>,
}

/// `grants.toml`: a table per plugin (its keys are `host::grants`'s).
#[derive(Default, Deserialize)]
struct OldGrants {
    #[serde(default)]
    plugins: BTreeMap<String, toml::Value>,
}

fn json<T: serde::de::DeserializeOwned>(file: &Path, text: &str, what: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| legacy_error(file, format!("{what}: {e}")))
}

/// How an imported file is recorded: its path relative to the home.
fn source(home: &Home, file: &Path) -> String {
    file.strip_prefix(home.root()).unwrap_or(file).to_string_lossy().into_owned()
}

/// The rows of one old file.
fn read(home: &Home, legacy: &Legacy) -> Result<ImportFile, StoreError> {
    let file = &legacy.file;
    let text = std::fs::read_to_string(file).map_err(|e| legacy_error(file, e))?;
    let mut rows = ImportFile { source: source(home, file), ..ImportFile::default() };
    match &legacy.kind {
        Kind::Vfs => {
            let nodes: BTreeMap<String, Node> = json(file, &text, "not a vfs tree")?;
            rows.vfs = nodes.into_iter().collect();
        }
        Kind::Triggers => {
            let stored: BTreeMap<String, OldTrigger> = json(file, &text, "not a trigger store")?;
            // Woken at the first tick, which works out when each is due.
            rows.triggers = stored
                .into_iter()
                .map(|(id, t)| TriggerRecord {
                    id,
                    trigger: t.trigger,
                    created: t.created,
                    fired: t.fired,
                    wake: Some(0),
                })
                .collect();
        }
        Kind::Config(plugin) => {
            let values: BTreeMap<String, Value> = json(file, &text, "not a JSON object")?;
            rows.config = values.into_iter().map(|(k, v)| (plugin.clone(), k, v)).collect();
        }
        Kind::Storage(plugin) => {
            let spaces: OldSpaces = json(file, &text, "not a storage file")?;
            rows.storage = spaces.global.into_iter().map(|(k, v)| (plugin.clone(), None, k, v)).collect();
            for (agent, space) in spaces.sessions {
                rows.storage.extend(space.into_iter().map(|(k, v)| (plugin.clone(), Some(agent.clone()), k, v)));
            }
        }
        Kind::PluginsState => {
            let state: OldState = toml::from_str(&text).map_err(|e| legacy_error(file, e))?;
            // A name in both lists is disabled (as the file was read).
            rows.choices = state.enabled.into_iter().map(|n| (n, true)).collect();
            rows.choices.extend(state.disabled.into_iter().map(|n| (n, false)));
        }
        Kind::Grants => {
            // Kept as `host::grants` reads them back: one JSON object per plugin.
            let file_rows: OldGrants = toml::from_str(&text).map_err(|e| legacy_error(file, e))?;
            for (plugin, grant) in file_rows.plugins {
                let grant = serde_json::to_value(&grant).map_err(|e| legacy_error(file, format!("`{plugin}`: {e}")))?;
                if !grant.is_object() {
                    return Err(legacy_error(file, format!("`plugins.{plugin}` is not a table")));
                }
                rows.grants.push((plugin, grant));
            }
        }
    }
    Ok(rows)
}

/// `<file>.migrated`, or `.migrated.<n>` when that is taken.
fn rename_aside(file: &Path) -> std::io::Result<PathBuf> {
    let mut last = None;
    for n in 0..100 {
        let mut name = file.as_os_str().to_owned();
        name.push(if n == 0 { ".migrated".to_owned() } else { format!(".migrated.{n}") });
        let to = PathBuf::from(name);
        match crate::home::rename_noreplace(file, &to) {
            Ok(()) => return Ok(to),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::from(std::io::ErrorKind::AlreadyExists)))
}

/// Imports `found` (not recorded before) in one transaction, then renames
/// every one of them aside. A plugin's own file that cannot be read is left
/// alone when `skip_plugin_errors`, else it fails the whole import.
fn import(
    home: &Home,
    store: &dyn Store,
    found: Vec<Legacy>,
    skip_plugin_errors: bool,
) -> Result<Vec<PathBuf>, StoreError> {
    if found.is_empty() {
        return Ok(Vec::new());
    }
    let done = store.imported()?;
    let mut files = Vec::new();
    let mut sound = Vec::new();
    for legacy in found {
        // Imported before (its rename failed): only renamed now.
        if done.contains(&source(home, &legacy.file)) {
            sound.push(legacy);
            continue;
        }
        match read(home, &legacy) {
            Ok(rows) => {
                files.push(rows);
                sound.push(legacy);
            }
            Err(e) if skip_plugin_errors && legacy.kind.plugin().is_some() => {
                tracing::warn!(
                    "{e}; left where it is, and plugin '{}' fails to load until it is fixed",
                    legacy.kind.plugin().unwrap_or_default()
                );
            }
            Err(e) => return Err(e),
        }
    }
    if !files.is_empty() {
        store.import(&files)?;
        tracing::info!("imported {} old state file(s) into {}", files.len(), home.state_db().display());
    }
    let mut renamed = Vec::new();
    for legacy in sound {
        match rename_aside(&legacy.file) {
            Ok(to) => renamed.push(to),
            Err(e) => tracing::warn!(
                "{} is imported but could not be renamed aside ({e}); it is left alone and renamed at the next start",
                legacy.file.display()
            ),
        }
    }
    Ok(renamed)
}

/// Imports `home`'s old state files into `store` and renames them aside
/// (see the module doc); what the store's first open in a process does.
/// Returns the files as renamed.
///
/// # Errors
/// A shared old file cannot be read or parsed (named; nothing is imported
/// or renamed), or the import failed.
pub fn run(home: &Home, store: &dyn Store) -> Result<Vec<PathBuf>, StoreError> {
    let grants = store.backend() == super::postgres::BACKEND;
    import(home, store, find(home, grants)?, true)
}

/// Imports `plugin`'s own old files, if any are left (one that could not be
/// read at the store's open, or one written since): what loading a plugin's
/// services does first. Returns the files as renamed.
///
/// # Errors
/// One of them cannot be read or parsed (named, with the reason; it is left
/// as it was), or the import failed.
pub fn plugin(home: &Home, store: &dyn Store, plugin: &str) -> Result<Vec<PathBuf>, StoreError> {
    import(home, store, plugin_files(home, plugin), false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::store::sqlite::SqliteStore;
    use crate::host::store::{Scope, Store};
    use serde_json::json;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// A home with one of each old file, as the JSON-file services wrote them.
    fn old_home() -> (tempfile::TempDir, Home) {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path());
        let agent = home.agent_dir();
        write(
            &agent.join("vfs.json"),
            r#"{"/plugins/a/x.md":{"kind":"file","content":"hello","owner":"a"},
               "/plugins/a/live":{"kind":"symbolic","owner":"a","searchable":true}}"#,
        );
        write(
            &agent.join("triggers.json"),
            r#"{"t1":{"trigger":{"id":"t1","type":"interval","interval_seconds":60,"plugin":"a"},"created":100,"fired":160}}"#,
        );
        write(&agent.join("plugins/a/agent_config.json"), r#"{"LIMIT":7}"#);
        write(&agent.join("plugins/a/agent_storage.json"), r#"{"global":{"n":1},"sessions":{"ag":{"mood":"calm"}}}"#);
        write(&home.state_file(), "disabled = [\"off\"]\nenabled = [\"on\"]\n");
        (dir, home)
    }

    fn store(home: &Home) -> SqliteStore {
        SqliteStore::open(&home.state_db()).unwrap()
    }

    #[test]
    fn every_old_file_is_imported_once_and_renamed_aside() {
        let (_dir, home) = old_home();
        let s = store(&home);
        let renamed = run(&home, &s).unwrap();
        assert_eq!(renamed.len(), 5, "{renamed:?}");
        assert!(renamed.iter().all(|f| f.to_string_lossy().ends_with(".migrated") && f.is_file()));
        assert!(!has_legacy_files(&home));

        assert_eq!(
            s.vfs_get("/plugins/a/x.md").unwrap(),
            Some(Node::File { content: "hello".into(), owner: "a".into() })
        );
        assert_eq!(s.vfs_get("/plugins/a/live").unwrap(), Some(Node::Symbolic { owner: "a".into(), searchable: true }));
        let t = s.trigger_get("t1").unwrap().unwrap();
        assert_eq!((t.created, t.fired, t.wake, t.owner()), (100, Some(160), Some(0), Some("a")));
        assert_eq!(s.config_values("a").unwrap()["LIMIT"], 7);
        assert_eq!(s.storage_get("a", Scope::Global, "n").unwrap(), Some(json!(1)));
        assert_eq!(s.storage_get("a", Scope::Session("ag"), "mood").unwrap(), Some(json!("calm")));
        assert_eq!((s.plugin_choice("off").unwrap(), s.plugin_choice("on").unwrap()), (Some(false), Some(true)));

        // A rename that failed: the file is back where it was, changed since.
        let vfs = home.agent_dir().join("vfs.json");
        write(&vfs, r#"{"/plugins/a/x.md":{"kind":"file","content":"stale","owner":"a"}}"#);
        let renamed = run(&home, &s).unwrap();
        assert_eq!(renamed, [home.agent_dir().join("vfs.json.migrated.1")]);
        assert_eq!(
            s.vfs_get("/plugins/a/x.md").unwrap(),
            Some(Node::File { content: "hello".into(), owner: "a".into() }),
            "imported at most once"
        );
        assert!(run(&home, &s).unwrap().is_empty());
    }

    #[test]
    fn a_corrupt_shared_file_fails_the_open_and_stays_as_it_was() {
        let (_dir, home) = old_home();
        let triggers = home.agent_dir().join("triggers.json");
        write(&triggers, "{\"t1\": {\"trigger\": ");
        let s = store(&home);
        let err = run(&home, &s).unwrap_err();
        assert!(matches!(&err.kind, StoreErrorKind::Legacy { file, .. } if *file == triggers), "{err}");
        let text = err.to_string();
        assert!(text.contains(&triggers.display().to_string()) && text.contains("EOF while parsing"), "{text}");
        assert_eq!(std::fs::read_to_string(&triggers).unwrap(), "{\"t1\": {\"trigger\": ", "never overwritten");
        assert!(
            s.imported().unwrap().is_empty() && s.vfs_get("/plugins/a/x.md").unwrap().is_none(),
            "nothing imported"
        );
        assert!(home.agent_dir().join("vfs.json").is_file(), "nothing renamed");

        write(&home.state_file(), "disabled = [broken");
        write(&triggers, "{}");
        let err = run(&home, &s).unwrap_err().to_string();
        assert!(err.contains("plugins-state.toml") && err.contains("unclosed array"), "{err}");
    }

    #[test]
    fn a_plugins_corrupt_file_is_that_plugins_error_only() {
        let (_dir, home) = old_home();
        let storage = home.agent_dir().join("plugins/a/agent_storage.json");
        write(&storage, "nope");
        let s = store(&home);
        let renamed = run(&home, &s).unwrap();
        assert_eq!(renamed.len(), 4, "the sound files went in: {renamed:?}");
        assert_eq!(s.config_values("a").unwrap()["LIMIT"], 7);
        assert_eq!(std::fs::read_to_string(&storage).unwrap(), "nope", "left where it was");
        let err = plugin(&home, &s, "a").unwrap_err().to_string();
        assert!(err.contains(&storage.display().to_string()) && err.contains("not a storage file"), "{err}");
        assert!(plugin(&home, &s, "b").unwrap().is_empty(), "another plugin loads");

        write(&storage, r#"{"global":{"fixed":true}}"#);
        assert_eq!(plugin(&home, &s, "a").unwrap().len(), 1);
        assert_eq!(s.storage_get("a", Scope::Global, "fixed").unwrap(), Some(json!(true)));
    }
}
