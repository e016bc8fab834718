//! `plugin.json`: FaustBot's manifest, read into [`PluginJson`].
//!
//! The fields and defaults are FaustBot's (`id`, `name`, `version`,
//! `description`, `author`, `homepage`, `enabled`, `entry`, `permissions`,
//! `priority`), with three deliberate differences: `entry` defaults to
//! `impl.py` when that file exists (else `main.py`); `priority = 0` stays 0
//! (FaustBot's `or 100` turns it into 100); a field of the wrong type is an
//! error naming it instead of a silent `bool("false") == True`. Unknown keys
//! are kept. Never runs anything.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// The manifest file of a FaustBot plugin.
pub const PLUGIN_JSON: &str = "plugin.json";

/// A refused plugin.json: the file, the key (when one is to blame), why.
#[derive(Debug, thiserror::Error)]
#[error("invalid plugin manifest `{}`{}: {reason}", file.display(), key.as_ref().map(|k| format!(", key `{k}`")).unwrap_or_default())]
pub struct PluginJsonError {
    pub file: PathBuf,
    pub key: Option<String>,
    pub reason: String,
}

/// A checked plugin.json.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginJson {
    /// The plugin's identity in ctxhost: its directory name (FaustBot's `id`
    /// defaults to it; a different `id` is warned about).
    pub id: String,
    pub declared_id: Option<String>,
    pub name: String,
    pub version: String,
    pub description: String,
    pub author: String,
    pub homepage: String,
    /// The default enabled state (`ctxhost plugin enable|disable` overrides it).
    pub enabled: bool,
    /// The entry file, relative to the plugin dir.
    pub entry: String,
    pub permissions: Vec<String>,
    /// Smaller first (FaustBot's order), default 100.
    pub priority: i64,
    /// Keys FaustBot does not define, kept.
    pub unknown: Map<String, Value>,
}

/// The keys of plugin.json ctxhost reads; others are kept in `PluginJson::unknown`.
pub const KNOWN: [&str; 10] =
    ["id", "name", "version", "description", "author", "homepage", "enabled", "entry", "permissions", "priority"];

/// The text of `<dir>/plugin.json`, read beneath `dir` and never through a
/// link (a plugin.json linked to a file outside is refused unread).
///
/// # Errors
/// Missing, a link, not a regular file, too large or not UTF-8.
pub fn read_plugin_json(dir: &Path) -> Result<String, crate::manifest::beneath::BeneathError> {
    use crate::manifest::beneath::{MANIFEST_LIMIT, Root};
    Root::open(dir)?.read_to_string(Path::new(PLUGIN_JSON), MANIFEST_LIMIT)
}

impl PluginJson {
    /// Reads `<dir>/plugin.json`; the plugin is known by the directory's name.
    ///
    /// # Errors
    /// The file cannot be read, is not a JSON object, or a field has the
    /// wrong type; the entry file does not exist.
    pub fn load(dir: &Path) -> Result<(PluginJson, Vec<String>), PluginJsonError> {
        let file = dir.join(PLUGIN_JSON);
        let fail = |key: Option<&str>, reason: String| PluginJsonError {
            file: file.clone(),
            key: key.map(str::to_owned),
            reason,
        };
        // Beneath the plugin dir, never through a link (see `manifest::beneath`).
        let text = read_plugin_json(dir).map_err(|e| fail(None, e.reason.to_string()))?;
        let raw: Value = serde_json::from_str(&text).map_err(|e| fail(None, format!("not valid JSON: {e}")))?;
        let Value::Object(raw) = raw else {
            return Err(fail(None, format!("must be a JSON object, not {}", crate::protocol::json_kind(&raw))));
        };
        // The name of the directory as given (a symlinked plugin dir is known
        // by the link's name); `.` and the like fall back to the real name.
        let dir_name = dir
            .file_name()
            .filter(|n| *n != "." && *n != "..")
            .map(|n| n.to_string_lossy().into_owned())
            .or_else(|| dir.canonicalize().ok()?.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_default();
        crate::manifest::validate_name(&dir_name).map_err(|m| fail(None, format!("directory name: {m}")))?;
        let text_field = |key: &str, default: &str| -> Result<String, PluginJsonError> {
            match raw.get(key) {
                None | Some(Value::Null) => Ok(default.to_owned()),
                Some(Value::String(s)) => Ok(s.clone()),
                Some(Value::Number(n)) => Ok(n.to_string()),
                Some(other) => {
                    Err(fail(Some(key), format!("must be a string, not {}", crate::protocol::json_kind(other))))
                }
            }
        };
        let mut warnings = Vec::new();
        let declared_id = match raw.get("id") {
            None | Some(Value::Null) => None,
            Some(_) => Some(text_field("id", "")?),
        };
        if let Some(id) = declared_id.as_deref().filter(|id| *id != dir_name) {
            warnings.push(format!(
                "`id` is '{id}' but the directory is '{dir_name}'; the plugin is known as '{dir_name}' (its directory name)"
            ));
        }
        let enabled = match raw.get("enabled") {
            None | Some(Value::Null) => true,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                return Err(fail(Some("enabled"), format!("must be true or false, not {other}")));
            }
        };
        let entry = match raw.get("entry") {
            None | Some(Value::Null) => {
                if dir.join("impl.py").is_file() {
                    "impl.py".to_owned()
                } else {
                    "main.py".to_owned()
                }
            }
            Some(_) => text_field("entry", "")?,
        };
        if Path::new(&entry).components().any(|c| !matches!(c, std::path::Component::Normal(_))) {
            return Err(fail(Some("entry"), format!("`{entry}` must be a relative path inside the plugin directory")));
        }
        if !dir.join(&entry).is_file() {
            return Err(fail(
                Some("entry"),
                format!("the entry file `{entry}` does not exist in the plugin directory"),
            ));
        }
        let permissions = match raw.get("permissions") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.clone()),
                    other => Err(fail(Some("permissions"), format!("every item must be a string, not {other}"))),
                })
                .collect::<Result<_, _>>()?,
            Some(other) => return Err(fail(Some("permissions"), format!("must be a list of strings, not {other}"))),
        };
        let priority = match raw.get("priority") {
            None | Some(Value::Null) => 100,
            Some(Value::Number(n)) if n.is_i64() => n.as_i64().unwrap_or(100),
            Some(Value::String(s)) if s.trim().parse::<i64>().is_ok() => s.trim().parse().unwrap_or(100),
            Some(other) => return Err(fail(Some("priority"), format!("must be an integer, not {other}"))),
        };
        let unknown: Map<String, Value> =
            raw.iter().filter(|(k, _)| !KNOWN.contains(&k.as_str())).map(|(k, v)| (k.clone(), v.clone())).collect();
        let manifest = PluginJson {
            name: text_field("name", declared_id.as_deref().unwrap_or(&dir_name))?,
            version: text_field("version", "0.1.0")?,
            description: text_field("description", "")?,
            author: text_field("author", "")?,
            homepage: text_field("homepage", "")?,
            id: dir_name,
            declared_id,
            enabled,
            entry,
            permissions,
            priority,
            unknown,
        };
        Ok((manifest, warnings))
    }

    /// The normalised manifest the shim hands the plugin (`PluginManifest`).
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "id": self.id, "name": self.name, "version": self.version, "description": self.description,
            "author": self.author, "homepage": self.homepage, "enabled": self.enabled, "entry": self.entry,
            "permissions": self.permissions, "priority": self.priority,
        })
    }

    /// Whether `permissions` lets the plugin register `kind:name` (`tool`,
    /// `middleware`); `kind:*` allows every name of that kind.
    pub fn permits(&self, kind: &str, name: &str) -> bool {
        self.permissions.iter().any(|p| p == &format!("{kind}:{name}") || p == &format!("{kind}:*"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_with(json: &str, files: &[&str]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("my-plugin");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(PLUGIN_JSON), json).unwrap();
        for f in files {
            std::fs::write(dir.join(f), "").unwrap();
        }
        root
    }

    fn load(root: &tempfile::TempDir) -> Result<(PluginJson, Vec<String>), PluginJsonError> {
        PluginJson::load(&root.path().join("my-plugin"))
    }

    #[test]
    fn defaults_follow_faustbot_with_impl_py_preferred() {
        let root = dir_with(r#"{"permissions": ["tool:echo"], "x-extra": 1}"#, &["impl.py", "main.py"]);
        let (m, warnings) = load(&root).unwrap();
        assert_eq!((m.id.as_str(), m.name.as_str(), m.version.as_str()), ("my-plugin", "my-plugin", "0.1.0"));
        assert_eq!((m.entry.as_str(), m.enabled, m.priority), ("impl.py", true, 100));
        assert!(m.permits("tool", "echo") && !m.permits("tool", "other") && !m.permits("middleware", "echo"));
        assert_eq!(m.unknown["x-extra"], 1);
        assert!(warnings.is_empty());
        let root = dir_with(r#"{"id": "other", "priority": 0}"#, &["main.py"]);
        let (m, warnings) = load(&root).unwrap();
        assert_eq!((m.entry.as_str(), m.priority), ("main.py", 0), "0 stays 0");
        assert!(warnings[0].contains("known as 'my-plugin'"), "{warnings:?}");
    }

    #[test]
    fn errors_name_the_file_and_key() {
        let root = dir_with("{not json", &["impl.py"]);
        let err = load(&root).unwrap_err().to_string();
        assert!(err.contains("plugin.json") && err.contains("not valid JSON"), "{err}");
        let root = dir_with(r#"{"enabled": "false"}"#, &["impl.py"]);
        assert!(load(&root).unwrap_err().to_string().contains("key `enabled`: must be true or false"));
        let root = dir_with(r#"{"entry": "../x.py"}"#, &[]);
        assert!(load(&root).unwrap_err().to_string().contains("key `entry`"));
        let root = dir_with(r#"{}"#, &[]);
        assert!(load(&root).unwrap_err().to_string().contains("`main.py` does not exist"));
        let root = dir_with(r#"{"permissions": "tool:x"}"#, &["impl.py"]);
        assert!(load(&root).unwrap_err().to_string().contains("key `permissions`"));
    }
}
