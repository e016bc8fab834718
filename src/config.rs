//! `config.toml`: the operator's settings for the host (spec section 12).
//!
//! Only what the host itself reads lives here; a missing file means all
//! defaults. Unknown keys are kept out of the way with a warning, never fatal.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::{Map, Value};

/// Settings read from `config.toml`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct HostConfig {
    /// Host variables passed through to every hook (after the runtime's own).
    pub allowed_env_vars: Vec<String>,
    /// Per plugin: values overriding its `[config.*]` defaults.
    pub plugin_config: BTreeMap<String, Map<String, Value>>,
}

/// A config.toml that could not be read or parsed.
#[derive(Debug, thiserror::Error)]
#[error("invalid config file `{}`: {reason}", file.display())]
pub struct ConfigError {
    pub file: std::path::PathBuf,
    pub reason: String,
}

const KNOWN_KEYS: &[&str] = &["allowed_env_vars", "plugin_config"];

impl HostConfig {
    /// Reads `file`; a missing file yields the defaults. Returns the config
    /// and one warning per unknown top-level key.
    ///
    /// # Errors
    /// Unreadable file, bad TOML (the message names the line), or a known key
    /// of the wrong type.
    pub fn load(file: &Path) -> Result<(HostConfig, Vec<String>), ConfigError> {
        let fail = |reason: String| ConfigError { file: file.to_owned(), reason };
        let text = match std::fs::read_to_string(file) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((HostConfig::default(), Vec::new())),
            Err(e) => return Err(fail(format!("cannot read it: {e}"))),
        };
        let mut table: toml::Table = toml::from_str(&text).map_err(|e| fail(e.to_string().trim_end().to_owned()))?;
        let mut warnings = Vec::new();
        table.retain(|key, _| {
            let known = KNOWN_KEYS.contains(&key);
            if !known {
                let hint = crate::hint::did_you_mean(key, KNOWN_KEYS.iter().copied());
                warnings.push(format!("{}: unknown key `{key}` is ignored{hint}", file.display()));
            }
            known
        });
        let config = toml::Value::Table(table).try_into().map_err(|e: toml::de::Error| fail(e.to_string()))?;
        Ok((config, warnings))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_file_is_defaults_and_unknown_keys_warn() {
        let dir = tempfile::tempdir().unwrap();
        let (c, w) = HostConfig::load(&dir.path().join("nope.toml")).unwrap();
        assert_eq!(c, HostConfig::default());
        assert!(w.is_empty());

        let file = dir.path().join("config.toml");
        std::fs::write(&file, "allowed_env_vars = [\"LANG\"]\nallowed_env_var = 1\n[plugin_config.p]\nsize = 3\n")
            .unwrap();
        let (c, w) = HostConfig::load(&file).unwrap();
        assert_eq!(c.allowed_env_vars, ["LANG"]);
        assert_eq!(c.plugin_config["p"]["size"], 3);
        assert_eq!(w.len(), 1);
        assert!(
            w[0].ends_with("unknown key `allowed_env_var` is ignored; did you mean `allowed_env_vars`?"),
            "{}",
            w[0]
        );

        std::fs::write(&file, "allowed_env_vars = [\n").unwrap();
        let err = HostConfig::load(&file).unwrap_err().to_string();
        assert!(err.contains("line 1"), "{err}");
    }
}
