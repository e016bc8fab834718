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

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::host::store::{Store, StoreError};

/// The type of a config field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FieldType {
    Str,
    Int,
    Float,
    Bool,
    Json,
    Text,
}

impl FieldType {
    fn parse(name: &str) -> Option<FieldType> {
        Some(match name.trim().to_ascii_lowercase().as_str() {
            "str" | "string" => FieldType::Str,
            "int" | "integer" => FieldType::Int,
            "float" | "number" => FieldType::Float,
            "bool" | "boolean" => FieldType::Bool,
            "json" => FieldType::Json,
            "text" => FieldType::Text,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            FieldType::Str => "str",
            FieldType::Int => "int",
            FieldType::Float => "float",
            FieldType::Bool => "bool",
            FieldType::Json => "json",
            FieldType::Text => "text",
        }
    }
}

/// One field of a schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Field {
    pub key: String,
    #[serde(rename = "type")]
    pub kind: FieldType,
    #[serde(default)]
    pub label: String,
    #[serde(default)]
    pub default: Value,
    #[serde(default)]
    pub description: String,
}

/// A schema, a value or a file that is not what it should be.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("config schema line {line:?}: {reason} (expected `KEY:type:label=default`)")]
    LegacyLine { line: String, reason: String },
    #[error("config key `{key}` is not in the plugin's schema{hint}")]
    UnknownKey { key: String, hint: String },
    #[error("config key `{key}` expects {expected}, got {got}")]
    Type { key: String, expected: &'static str, got: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Parses FaustBot's legacy schema lines (`KEY:type:label=default`; the
/// label and the default are optional).
///
/// # Errors
/// A line without a key, or with an unknown type, named.
pub fn parse_legacy(lines: &[String]) -> Result<Vec<Field>, ConfigError> {
    lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let fail = |reason: &str| ConfigError::LegacyLine { line: line.clone(), reason: reason.to_owned() };
            let mut parts = line.splitn(3, ':');
            let key = parts.next().map(str::trim).filter(|k| !k.is_empty()).ok_or_else(|| fail("no key"))?;
            let kind_text = parts.next().ok_or_else(|| fail("no type"))?;
            let kind = FieldType::parse(kind_text).ok_or_else(|| fail("unknown type"))?;
            let (label, default) = match parts.next() {
                Some(rest) => match rest.split_once('=') {
                    Some((label, default)) => (label.trim().to_owned(), Some(default.trim().to_owned())),
                    None => (rest.trim().to_owned(), None),
                },
                None => (String::new(), None),
            };
            let default = match default {
                Some(text) => coerce(key, kind, &Value::String(text))?,
                None => Value::Null,
            };
            Ok(Field { key: key.to_owned(), kind, label, default, description: String::new() })
        })
        .collect()
}

/// A schema as a service call or a manifest gives it: a list whose items are
/// field objects (`{"key","type",…}`) or legacy lines, or an object of
/// `KEY = {type, label, default, description}` (plugin.toml's
/// `[agent_config]`).
///
/// # Errors
/// An item that is neither, named.
pub fn parse_schema(schema: &Value) -> Result<Vec<Field>, ConfigError> {
    let field = |key: Option<&str>, v: &Value| -> Result<Field, ConfigError> {
        let mut v = v.clone();
        if let (Some(key), Value::Object(m)) = (key, &mut v) {
            m.insert("key".into(), Value::String(key.to_owned()));
        }
        let text = v.to_string();
        let mut f: Field = serde_json::from_value(v)
            .map_err(|e| ConfigError::LegacyLine { line: text, reason: format!("not a schema field: {e}") })?;
        if !f.default.is_null() {
            f.default = coerce(&f.key, f.kind, &f.default)?;
        }
        Ok(f)
    };
    match schema {
        Value::Array(items) => items
            .iter()
            .map(|item| match item {
                Value::String(line) => parse_legacy(std::slice::from_ref(line)).map(|mut fs| fs.pop()).and_then(|f| {
                    f.ok_or_else(|| ConfigError::LegacyLine { line: line.clone(), reason: "empty".into() })
                }),
                other => field(None, other),
            })
            .collect(),
        Value::Object(map) => map.iter().map(|(k, v)| field(Some(k), v)).collect(),
        Value::Null => Ok(Vec::new()),
        other => {
            Err(ConfigError::LegacyLine { line: other.to_string(), reason: "a schema is a list or a table".into() })
        }
    }
}

/// `value` as field type `kind` demands: strings are parsed for numbers,
/// booleans and JSON (as a form or a legacy default gives them).
///
/// # Errors
/// A value that cannot be read as that type.
pub fn coerce(key: &str, kind: FieldType, value: &Value) -> Result<Value, ConfigError> {
    let bad = || ConfigError::Type { key: key.to_owned(), expected: kind.name(), got: value.to_string() };
    Ok(match (kind, value) {
        (FieldType::Str | FieldType::Text, Value::String(_)) => value.clone(),
        (FieldType::Str | FieldType::Text, Value::Number(n)) => Value::String(n.to_string()),
        (FieldType::Str | FieldType::Text, Value::Bool(b)) => Value::String(b.to_string()),
        (FieldType::Int, Value::Number(n)) if n.is_i64() || n.is_u64() => value.clone(),
        (FieldType::Int, Value::Number(n)) => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Value::from(f as i64),
            _ => return Err(bad()),
        },
        (FieldType::Int, Value::String(s)) => Value::from(s.trim().parse::<i64>().map_err(|_| bad())?),
        (FieldType::Float, Value::Number(_)) => value.clone(),
        (FieldType::Float, Value::String(s)) => {
            serde_json::Number::from_f64(s.trim().parse::<f64>().map_err(|_| bad())?)
                .map(Value::Number)
                .ok_or_else(bad)?
        }
        (FieldType::Bool, Value::Bool(_)) => value.clone(),
        (FieldType::Bool, Value::String(s)) => match s.trim().to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Value::Bool(true),
            "false" | "0" | "no" | "off" | "" => Value::Bool(false),
            _ => return Err(bad()),
        },
        (FieldType::Json, Value::String(s)) => serde_json::from_str(s).unwrap_or_else(|_| value.clone()),
        (FieldType::Json, _) => value.clone(),
        (_, Value::Null) => Value::Null,
        _ => return Err(bad()),
    })
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
    pub fn open(store: Arc<dyn Store>, plugin: &str, schema: Vec<Field>) -> Result<PluginConfig, ConfigError> {
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
    pub fn store_changes(store: &dyn Store, plugin: &str, changes: &[Change]) -> Result<(), ConfigError> {
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
    pub fn set(&mut self, key: &str, value: &Value) -> Result<Change, ConfigError> {
        let mut one = Map::new();
        one.insert(key.to_owned(), value.clone());
        let changes = self.plan(&one)?;
        Self::store_changes(&*self.store, &self.plugin, &changes)?;
        self.apply(&changes);
        changes.into_iter().next().ok_or_else(|| ConfigError::UnknownKey { key: key.to_owned(), hint: String::new() })
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
