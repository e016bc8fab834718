//! The key-value storage service of agent-loop plugins
//! (`../shared/spec/agent-hooks.md`, "Host services": storage): per plugin,
//! in two scopes — `global`, and `session` (one space per agent).
//!
//! Values are JSON. Each plugin's storage is one file in its data dir
//! (`agent_storage.json`), replaced atomically; plugins never see each
//! other's. This module stores; it does no locking of its own (one
//! `Storage` per plugin, behind the caller's lock).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where a key lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope<'a> {
    Global,
    /// One agent's session.
    Session(&'a str),
}

/// A storage file that cannot be read or written.
#[derive(Debug, thiserror::Error)]
#[error("storage file `{}`: {reason}", file.display())]
pub struct StorageError {
    pub file: PathBuf,
    pub reason: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Spaces {
    #[serde(default)]
    global: BTreeMap<String, Value>,
    #[serde(default)]
    sessions: BTreeMap<String, BTreeMap<String, Value>>,
}

/// One plugin's storage.
#[derive(Debug)]
pub struct Storage {
    spaces: Spaces,
    file: PathBuf,
}

impl Storage {
    /// The storage kept in `data_dir` (none yet: empty).
    ///
    /// # Errors
    /// A file that exists but cannot be read or parsed.
    pub fn open(data_dir: &Path) -> Result<Storage, StorageError> {
        let file = data_dir.join("agent_storage.json");
        let fail = |reason: String| StorageError { file: file.clone(), reason };
        let spaces = super::load_json(&file).map_err(|e| fail(e.to_string()))?;
        Ok(Storage { spaces, file })
    }

    fn space(&self, scope: Scope<'_>) -> Option<&BTreeMap<String, Value>> {
        match scope {
            Scope::Global => Some(&self.spaces.global),
            Scope::Session(agent) => self.spaces.sessions.get(agent),
        }
    }

    /// How many keys the storage holds, in every scope.
    pub fn len(&self) -> usize {
        self.spaces.global.len() + self.spaces.sessions.values().map(BTreeMap::len).sum::<usize>()
    }

    /// Bytes of all values, as JSON, in every scope (what the storage quota counts).
    pub fn bytes(&self) -> usize {
        let size = |v: &Value| serde_json::to_vec(v).map_or(0, |v| v.len());
        let spaces = std::iter::once(&self.spaces.global).chain(self.spaces.sessions.values());
        spaces.flat_map(BTreeMap::values).map(size).sum()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, scope: Scope<'_>, key: &str) -> Option<&Value> {
        self.space(scope).and_then(|s| s.get(key))
    }

    /// Stores `value` under `key`, persisting at once.
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn set(&mut self, scope: Scope<'_>, key: &str, value: Value) -> Result<(), StorageError> {
        let space = match scope {
            Scope::Global => &mut self.spaces.global,
            Scope::Session(agent) => self.spaces.sessions.entry(agent.to_owned()).or_default(),
        };
        space.insert(key.to_owned(), value);
        self.save()
    }

    /// Removes `key`; `true` when it was there.
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn delete(&mut self, scope: Scope<'_>, key: &str) -> Result<bool, StorageError> {
        let removed = match scope {
            Scope::Global => self.spaces.global.remove(key).is_some(),
            Scope::Session(agent) => {
                let removed = self.spaces.sessions.get_mut(agent).is_some_and(|s| s.remove(key).is_some());
                if self.spaces.sessions.get(agent).is_some_and(BTreeMap::is_empty) {
                    self.spaces.sessions.remove(agent);
                }
                removed
            }
        };
        if removed {
            self.save()?;
        }
        Ok(removed)
    }

    fn save(&self) -> Result<(), StorageError> {
        super::save_json(&self.file, &self.spaces).map_err(|reason| StorageError { file: self.file.clone(), reason })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn scopes_are_apart_and_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Storage::open(dir.path()).unwrap();
        s.set(Scope::Global, "count", json!(1)).unwrap();
        s.set(Scope::Session("a1"), "count", json!(10)).unwrap();
        s.set(Scope::Session("a2"), "mood", json!("calm")).unwrap();
        assert_eq!(s.get(Scope::Global, "count"), Some(&json!(1)));
        assert_eq!(s.get(Scope::Session("a1"), "count"), Some(&json!(10)));
        assert_eq!(s.get(Scope::Session("a2"), "count"), None, "another agent's session");
        assert_eq!(s.get(Scope::Session("a3"), "mood"), None);

        assert!(s.delete(Scope::Session("a1"), "count").unwrap());
        assert!(!s.delete(Scope::Session("a1"), "count").unwrap());
        assert_eq!(s.get(Scope::Global, "count"), Some(&json!(1)), "global untouched");

        let again = Storage::open(dir.path()).unwrap();
        assert_eq!(again.get(Scope::Session("a2"), "mood"), Some(&json!("calm")));
        assert_eq!(again.get(Scope::Global, "count"), Some(&json!(1)));

        std::fs::write(dir.path().join("agent_storage.json"), "nope").unwrap();
        assert!(Storage::open(dir.path()).unwrap_err().to_string().contains("agent_storage.json"));
    }
}
