//! The key-value storage service of agent-loop plugins
//! (`../shared/spec/agent-hooks.md`, "Host services": storage): per plugin,
//! in two scopes — `global`, and `session` (one space per agent).
//!
//! Values are JSON, kept in the state store (`host::store`), which holds each
//! plugin to its quota in the write's transaction; plugins never see each
//! other's. This module has no state and no lock of its own.

use std::sync::Arc;

use serde_json::Value;

pub use crate::host::store::Scope;
use crate::host::store::{Store, StoreError, StoreErrorKind, quota};

/// A storage write that was refused or failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// Over the plugin's quota (the text names the limit).
    #[error("{0}")]
    Quota(String),
    #[error(transparent)]
    Store(StoreError),
}

impl From<StoreError> for StorageError {
    fn from(e: StoreError) -> Self {
        match e.kind {
            StoreErrorKind::Quota(reason) => StorageError::Quota(reason),
            _ => StorageError::Store(e),
        }
    }
}

/// One plugin's storage. Every method blocks (a store call): on the async
/// runtime, call it through `host::store::off_runtime`.
#[derive(Clone)]
pub struct Storage {
    store: Arc<dyn Store>,
    plugin: String,
}

impl Storage {
    /// `plugin`'s storage in `store`.
    pub fn new(store: Arc<dyn Store>, plugin: &str) -> Storage {
        Storage { store, plugin: plugin.to_owned() }
    }

    /// The value under `key`, if any.
    ///
    /// # Errors
    /// The store failed.
    pub fn get(&self, scope: Scope<'_>, key: &str) -> Result<Option<Value>, StorageError> {
        Ok(self.store.storage_get(&self.plugin, scope, key)?)
    }

    /// Stores `value` under `key`, within the plugin's quota.
    ///
    /// # Errors
    /// Over the quota, or the store failed (then nothing changed).
    pub fn set(&self, scope: Scope<'_>, key: &str, value: &Value) -> Result<(), StorageError> {
        Ok(self.store.storage_put(&self.plugin, scope, key, value, Some(&quota::STORAGE))?)
    }

    /// Removes `key`; `true` when it was there.
    ///
    /// # Errors
    /// The store failed.
    pub fn delete(&self, scope: Scope<'_>, key: &str) -> Result<bool, StorageError> {
        Ok(self.store.storage_delete(&self.plugin, scope, key)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn scopes_are_apart_and_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("state.db");
        let open = || -> Arc<dyn Store> { Arc::new(crate::host::store::sqlite::SqliteStore::open(&db).unwrap()) };
        let s = Storage::new(open(), "p");
        s.set(Scope::Global, "count", &json!(1)).unwrap();
        s.set(Scope::Session("a1"), "count", &json!(10)).unwrap();
        s.set(Scope::Session("a2"), "mood", &json!("calm")).unwrap();
        assert_eq!(s.get(Scope::Global, "count").unwrap(), Some(json!(1)));
        assert_eq!(s.get(Scope::Session("a1"), "count").unwrap(), Some(json!(10)));
        assert_eq!(s.get(Scope::Session("a2"), "count").unwrap(), None, "another agent's session");
        assert_eq!(s.get(Scope::Session("a3"), "mood").unwrap(), None);
        assert_eq!(Storage::new(open(), "q").get(Scope::Global, "count").unwrap(), None, "another plugin's");

        assert!(s.delete(Scope::Session("a1"), "count").unwrap());
        assert!(!s.delete(Scope::Session("a1"), "count").unwrap());
        assert_eq!(s.get(Scope::Global, "count").unwrap(), Some(json!(1)), "global untouched");

        drop(s);
        let again = Storage::new(open(), "p");
        assert_eq!(again.get(Scope::Session("a2"), "mood").unwrap(), Some(json!("calm")));
        assert_eq!(again.get(Scope::Global, "count").unwrap(), Some(json!(1)));
    }
}
