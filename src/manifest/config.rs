//! `[config.<key>]`: a plugin's declared settings, resolved to the JSON object
//! a hook reads from the file named by `LIBREFANG_PLUGIN_CONFIG`.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value};

/// The declared type of a config field (LibreFang accepts exactly these).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConfigType {
    #[default]
    String,
    Number,
    Boolean,
}

impl ConfigType {
    pub fn as_str(self) -> &'static str {
        match self {
            ConfigType::String => "string",
            ConfigType::Number => "number",
            ConfigType::Boolean => "boolean",
        }
    }

    pub fn accepts(self, value: &Value) -> bool {
        matches!(
            (self, value),
            (ConfigType::String, Value::String(_))
                | (ConfigType::Number, Value::Number(_))
                | (ConfigType::Boolean, Value::Bool(_))
        )
    }
}

/// One `[config.<key>]` entry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ConfigField {
    #[serde(rename = "type", default)]
    pub kind: ConfigType,
    #[serde(default)]
    pub default: Option<Value>,
    #[serde(default)]
    pub description: Option<String>,
}

/// The fields of a `[config.<key>]` entry.
pub const CONFIG_FIELDS: &[&str] = &["type", "default", "description"];

/// Defaults, then the operator's overrides for declared keys. Keys without a
/// default and without an override are left out, as LibreFang does. Returns
/// the object and a warning for each override that was not used.
pub fn resolve(
    schema: &BTreeMap<String, ConfigField>,
    overrides: &Map<String, Value>,
) -> (Map<String, Value>, Vec<String>) {
    let mut resolved = Map::new();
    let mut warnings = Vec::new();
    for (key, field) in schema {
        if let Some(default) = &field.default {
            resolved.insert(key.clone(), default.clone());
        }
    }
    for (key, value) in overrides {
        match schema.get(key) {
            None => warnings.push(format!(
                "config override `{key}` is not declared by the plugin's [config] and is ignored{}",
                crate::hint::did_you_mean(key, schema.keys().map(String::as_str))
            )),
            Some(field) if !field.kind.accepts(value) => warnings.push(format!(
                "config override `{key}` should be a {}, not {value}; the default is used",
                field.kind.as_str()
            )),
            Some(_) => {
                resolved.insert(key.clone(), value.clone());
            }
        }
    }
    (resolved, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_then_overrides_for_declared_keys_only() {
        let schema: BTreeMap<String, ConfigField> = toml::from_str(
            r#"
            model = { type = "string", default = "small" }
            size = { type = "number", default = 10 }
            flag = { type = "boolean" }
            "#,
        )
        .unwrap();
        let overrides = json!({"size": 20, "flag": "yes", "nope": 1}).as_object().unwrap().clone();
        let (resolved, warnings) = resolve(&schema, &overrides);
        assert_eq!(Value::Object(resolved), json!({"model": "small", "size": 20}));
        assert_eq!(warnings.len(), 2);
        assert!(warnings.iter().any(|w| w.contains("`flag` should be a boolean")));
        assert!(warnings.iter().any(|w| w.contains("`nope` is not declared")));
    }
}
