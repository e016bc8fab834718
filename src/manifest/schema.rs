//! The config schema of agent-loop plugins (`[agent_config]` in plugin.toml,
//! a `describe-agent` answer, a `config.register` call): typed fields, read
//! from a list of field objects or FaustBot's legacy lines
//! `KEY:type:label=default`, and the coercion of a value to a field's type.
//!
//! Pure: this module reads and checks schemas and values; it stores nothing
//! (the stored values are `host::config`'s).

use serde::{Deserialize, Serialize};
use serde_json::Value;

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
