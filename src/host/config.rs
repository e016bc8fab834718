//! The config service of agent-loop plugins (`../shared/spec/agent-hooks.md`,
//! "Host services"): a typed schema, values coerced by type, persisted per
//! plugin, and a change event for **every** set (FaustBot never fires
//! `config_changed` for plugin config).
//!
//! Schemas come as a list of fields or as FaustBot's legacy lines
//! `KEY:type:label=default`. Values live in `<data dir>/agent_config.json`,
//! replaced atomically. This module stores and checks; it never calls a
//! plugin (the caller turns each [`Change`] into a `config_changed` call).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

pub use crate::manifest::schema::{ConfigError, Field, FieldType, coerce, parse_legacy, parse_schema};

/// One `set`: what `config_changed` reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Change {
    pub key: String,
    pub old: Value,
    pub new: Value,
}

/// One plugin's config: its schema and its stored values.
#[derive(Debug)]
pub struct PluginConfig {
    schema: Vec<Field>,
    values: BTreeMap<String, Value>,
    file: PathBuf,
}

impl PluginConfig {
    /// The config stored under `data_dir` (none yet: no values).
    ///
    /// # Errors
    /// A file that exists but cannot be read or is not a JSON object.
    pub fn open(data_dir: &Path, schema: Vec<Field>) -> Result<PluginConfig, ConfigError> {
        let file = data_dir.join("agent_config.json");
        let values = super::load_json(&file).map_err(|e| {
            let reason = match e {
                super::JsonFileError::Parse(e) => format!("not a JSON object: {e}"),
                super::JsonFileError::Read(e) => e.to_string(),
            };
            ConfigError::File { path: file.clone(), reason }
        })?;
        Ok(PluginConfig { schema, values, file })
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
    /// As [`PluginConfig::set`], minus the file.
    pub fn check(&self, key: &str, value: &Value) -> Result<Value, ConfigError> {
        let field = self.field(key)?;
        coerce(key, field.kind, value)
    }

    /// Coerces and stores `value`, persisting at once. Returns the change,
    /// also when the value did not change (every set is reported).
    ///
    /// # Errors
    /// An unknown key, a value of the wrong type, or a file that cannot be
    /// written.
    pub fn set(&mut self, key: &str, value: &Value) -> Result<Change, ConfigError> {
        let field = self.field(key)?;
        let new = coerce(key, field.kind, value)?;
        let old = self.get(key, Value::Null);
        self.values.insert(key.to_owned(), new.clone());
        self.save()?;
        Ok(Change { key: key.to_owned(), old, new })
    }

    fn save(&self) -> Result<(), ConfigError> {
        super::save_json(&self.file, &self.values)
            .map_err(|reason| ConfigError::File { path: self.file.clone(), reason })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn legacy_lines_become_fields() {
        let lines =
            ["PUSH_THRESHOLD:int:Push threshold=3", "NAME:str", "ON:bool:Enabled=yes", ""].map(str::to_owned).to_vec();
        let fields = parse_legacy(&lines).unwrap();
        assert_eq!(fields.len(), 3);
        assert_eq!(
            (fields[0].key.as_str(), fields[0].kind, &fields[0].default),
            ("PUSH_THRESHOLD", FieldType::Int, &json!(3))
        );
        assert_eq!(fields[0].label, "Push threshold");
        assert_eq!((fields[1].kind, &fields[1].default), (FieldType::Str, &Value::Null));
        assert_eq!(fields[2].default, json!(true));
        let err = parse_legacy(&["X:colour".to_owned()]).unwrap_err().to_string();
        assert!(err.contains("unknown type"), "{err}");
        assert!(parse_legacy(&[":int".to_owned()]).unwrap_err().to_string().contains("no key"));
    }

    #[test]
    fn values_are_coerced_by_type() {
        assert_eq!(coerce("k", FieldType::Int, &json!("42")).unwrap(), json!(42));
        assert_eq!(coerce("k", FieldType::Int, &json!(7.0)).unwrap(), json!(7));
        assert_eq!(coerce("k", FieldType::Float, &json!("0.5")).unwrap(), json!(0.5));
        assert_eq!(coerce("k", FieldType::Bool, &json!("off")).unwrap(), json!(false));
        assert_eq!(coerce("k", FieldType::Str, &json!(3)).unwrap(), json!("3"));
        assert_eq!(coerce("k", FieldType::Json, &json!("{\"a\":1}")).unwrap(), json!({"a": 1}));
        let err = coerce("LIMIT", FieldType::Int, &json!("many")).unwrap_err().to_string();
        assert_eq!(err, "config key `LIMIT` expects int, got \"many\"");
        assert!(coerce("k", FieldType::Int, &json!(1.5)).is_err());
        assert!(coerce("k", FieldType::Bool, &json!([1])).is_err());
    }

    #[test]
    fn every_set_is_reported_and_persisted() {
        let dir = tempfile::tempdir().unwrap();
        let schema = parse_legacy(&["LIMIT:int:Limit=3".to_owned(), "NAME:str".to_owned()]).unwrap();
        let mut config = PluginConfig::open(dir.path(), schema.clone()).unwrap();
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

        // Survives a restart.
        let reopened = PluginConfig::open(dir.path(), schema).unwrap();
        assert_eq!(
            reopened.values(),
            BTreeMap::from([("LIMIT".to_owned(), json!(5)), ("NAME".to_owned(), Value::Null)])
        );

        std::fs::write(dir.path().join("agent_config.json"), "[1]").unwrap();
        let err = PluginConfig::open(dir.path(), Vec::new()).unwrap_err().to_string();
        assert!(err.contains("agent_config.json") && err.contains("not a JSON object"), "{err}");
    }
}
