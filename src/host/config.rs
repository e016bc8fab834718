//! The config service of agent-loop plugins (`../shared/spec/agent-hooks.md`,
//! "Host services"): a typed schema, values coerced by type, persisted per
//! plugin, and a change event for **every** set (FaustBot never fires
//! `config_changed` for plugin config).
//!
//! Schemas come as a list of fields or as FaustBot's legacy lines
//! `KEY:type:label=default`. Values live in the state store (`host::store`);
//! a [`PluginConfig`] holds the schema and a copy of the stored values that
//! changes only after the store committed. This module checks and stores; it
//! never calls a plugin (the caller turns each [`Change`] into a
//! `config_changed` call).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::host::store::{Store, StoreError};
pub use crate::manifest::schema::{ConfigError, Field, FieldType, coerce, parse_legacy, parse_schema};

/// A config change that was refused (by the schema) or failed (in the store).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PluginConfigError {
    #[error(transparent)]
    Refused(#[from] ConfigError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// One `set`: what `config_changed` reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Change {
    pub key: String,
    pub old: Value,
    pub new: Value,
}

/// One plugin's config: its schema and its stored values.
pub struct PluginConfig {
    schema: Vec<Field>,
    /// As the store holds them, since the last commit.
    values: BTreeMap<String, Value>,
    store: Arc<dyn Store>,
    plugin: String,
}

impl std::fmt::Debug for PluginConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginConfig").field("plugin", &self.plugin).field("values", &self.values).finish()
    }
}

impl PluginConfig {
    /// `plugin`'s config stored in `store` (none yet: no values). Blocks.
    ///
    /// # Errors
    /// The store failed, or holds a value that does not read back.
    pub fn open(store: Arc<dyn Store>, plugin: &str, schema: Vec<Field>) -> Result<PluginConfig, PluginConfigError> {
        let values = store.config_values(plugin)?;
        Ok(PluginConfig { schema, values, store, plugin: plugin.to_owned() })
    }

    pub fn schema(&self) -> &[Field] {
        &self.schema
    }

    fn field(&self, key: &str) -> Result<&Field, ConfigError> {
        self.schema.iter().find(|f| f.key == key).ok_or_else(|| ConfigError::UnknownKey {
            key: key.to_owned(),
            hint: crate::hint::did_you_mean(key, self.schema.iter().map(|f| f.key.as_str())),
        })
    }

    /// The stored value, else the schema default, else `fallback`.
    pub fn get(&self, key: &str, fallback: Value) -> Value {
        match self.values.get(key) {
            Some(v) => v.clone(),
            None => match self.schema.iter().find(|f| f.key == key) {
                Some(f) if !f.default.is_null() => f.default.clone(),
                _ => fallback,
            },
        }
    }

    /// Every key of the schema with its current value.
    pub fn values(&self) -> BTreeMap<String, Value> {
        self.schema.iter().map(|f| (f.key.clone(), self.get(&f.key, Value::Null))).collect()
    }

    /// Replaces the schema (a plugin registering its fields at run time);
    /// stored values are kept.
    pub fn set_schema(&mut self, schema: Vec<Field>) {
        self.schema = schema;
    }

    /// Whether `value` would be accepted for `key`, without storing it.
    ///
    /// # Errors
    /// An unknown key, or a value of the wrong type.
    pub fn check(&self, key: &str, value: &Value) -> Result<Value, ConfigError> {
        let field = self.field(key)?;
        coerce(key, field.kind, value)
    }

    /// The changes setting `values` would make (each coerced), checking every
    /// one first; nothing is stored. Every set is a change, also one to the
    /// same value (every set is reported).
    ///
    /// # Errors
    /// The first key that is unknown or of the wrong type.
    pub fn plan(&self, values: &Map<String, Value>) -> Result<Vec<Change>, ConfigError> {
        values
            .iter()
            .map(|(key, value)| {
                let new = self.check(key, value)?;
                Ok(Change { key: key.clone(), old: self.get(key, Value::Null), new })
            })
            .collect()
    }

    /// Stores `changes` of `plugin` in `store`, all or none. Blocks; takes no
    /// lock of a [`PluginConfig`], so its readers go on meanwhile.
    ///
    /// # Errors
    /// The store failed (then nothing changed).
    pub fn store_changes(store: &dyn Store, plugin: &str, changes: &[Change]) -> Result<(), PluginConfigError> {
        let values: BTreeMap<String, Value> = changes.iter().map(|c| (c.key.clone(), c.new.clone())).collect();
        Ok(store.config_put(plugin, &values)?)
    }

    /// Takes `changes` the store committed into this view.
    pub fn apply(&mut self, changes: &[Change]) {
        for c in changes {
            self.values.insert(c.key.clone(), c.new.clone());
        }
    }

    /// The store this config lives in, and whose it is.
    pub fn store(&self) -> (&Arc<dyn Store>, &str) {
        (&self.store, &self.plugin)
    }

    /// Coerces and stores `value`, in the store first, then here. Returns the
    /// change, also when the value did not change (every set is reported).
    /// Blocks.
    ///
    /// # Errors
    /// An unknown key, a value of the wrong type, or the store failed; then
    /// nothing changed.
    pub fn set(&mut self, key: &str, value: &Value) -> Result<Change, PluginConfigError> {
        let mut one = Map::new();
        one.insert(key.to_owned(), value.clone());
        let changes = self.plan(&one)?;
        Self::store_changes(&*self.store, &self.plugin, &changes)?;
        self.apply(&changes);
        let change = changes.into_iter().next();
        change.ok_or_else(|| ConfigError::UnknownKey { key: key.to_owned(), hint: String::new() }.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_set_is_reported_and_persisted() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("state.db");
        let open = || -> Arc<dyn Store> { Arc::new(crate::host::store::sqlite::SqliteStore::open(&db).unwrap()) };
        let schema = parse_legacy(&["LIMIT:int:Limit=3".to_owned(), "NAME:str".to_owned()]).unwrap();
        let mut config = PluginConfig::open(open(), "p", schema.clone()).unwrap();
        assert_eq!(config.get("LIMIT", json!(0)), json!(3), "the schema default");
        assert_eq!(config.get("NAME", json!("anon")), json!("anon"), "the caller's fallback");
        assert_eq!(config.get("OTHER", json!(1)), json!(1));

        let change = config.set("LIMIT", &json!("5")).unwrap();
        assert_eq!(change, Change { key: "LIMIT".into(), old: json!(3), new: json!(5) });
        let again = config.set("LIMIT", &json!(5)).unwrap();
        assert_eq!((again.old, again.new), (json!(5), json!(5)), "a set to the same value is still reported");
        let err = config.set("LIMT", &json!(1)).unwrap_err().to_string();
        assert!(err.contains("did you mean `LIMIT`"), "{err}");
        assert!(config.set("LIMIT", &json!("lots")).is_err());
        assert_eq!(config.get("LIMIT", json!(0)), json!(5), "a refused set changes nothing");

        // A store that fails the write: nothing changes, here or on disk.
        let broken = rusqlite::Connection::open(&db).unwrap();
        broken
            .execute_batch(
                "CREATE TRIGGER no_config BEFORE INSERT ON plugin_config BEGIN SELECT RAISE(ABORT, 'disk says no'); END;",
            )
            .unwrap();
        let err = config.set("LIMIT", &json!(6)).unwrap_err();
        assert!(matches!(&err, PluginConfigError::Store(e) if e.to_string().contains("disk says no")), "{err}");
        assert_eq!(config.get("LIMIT", json!(0)), json!(5), "memory as on disk");
        broken.execute_batch("DROP TRIGGER no_config;").unwrap();

        // Survives a restart; another plugin's config is its own.
        drop(config);
        let reopened = PluginConfig::open(open(), "p", schema.clone()).unwrap();
        assert_eq!(
            reopened.values(),
            BTreeMap::from([("LIMIT".to_owned(), json!(5)), ("NAME".to_owned(), Value::Null)])
        );
        assert_eq!(PluginConfig::open(open(), "q", schema).unwrap().get("LIMIT", Value::Null), json!(3));
    }
}
