//! A walker over the parsed plugin.toml tables that remembers which keys it
//! read, so that every remaining key can be reported as unknown.

use std::collections::BTreeSet;
use std::path::Path;

use serde::de::DeserializeOwned;

use super::error::{ManifestError, ManifestErrorKind};

pub(super) struct Reader<'a> {
    file: &'a Path,
    top: &'a toml::Table,
    hooks: Option<&'a toml::Table>,
    used_top: BTreeSet<&'a str>,
    used_hooks: BTreeSet<&'a str>,
    pub warnings: Vec<String>,
}

impl<'a> Reader<'a> {
    pub fn new(file: &'a Path, top: &'a toml::Table) -> Result<Self, ManifestError> {
        let hooks = match top.get("hooks") {
            None => None,
            Some(toml::Value::Table(t)) => Some(t),
            Some(other) => {
                return Err(ManifestError::new(
                    file,
                    Some("hooks"),
                    ManifestErrorKind::Invalid(format!("expected a table, found {}", other.type_str())),
                ));
            }
        };
        let mut used_top = BTreeSet::new();
        used_top.insert("hooks");
        Ok(Reader { file, top, hooks, used_top, used_hooks: BTreeSet::new(), warnings: Vec::new() })
    }

    pub fn warn(&mut self, message: String) {
        self.warnings.push(message);
    }

    pub fn error(&self, key: &str, kind: ManifestErrorKind) -> ManifestError {
        ManifestError::new(self.file, Some(key), kind)
    }

    fn convert<T: DeserializeOwned>(&self, key: &str, value: &toml::Value) -> Result<T, ManifestError> {
        value.clone().try_into().map_err(|e: toml::de::Error| {
            self.error(key, ManifestErrorKind::Invalid(e.message().trim_end().to_owned()))
        })
    }

    /// A table whose own fields are known: unknown fields are warned about
    /// (and left out), then the rest is converted.
    pub fn known_fields<T: DeserializeOwned>(
        &mut self,
        key: &str,
        value: toml::Value,
        known: &[&str],
    ) -> Result<T, ManifestError> {
        let value = match value {
            toml::Value::Table(mut table) => {
                let unknown: Vec<String> = table.keys().filter(|k| !known.contains(&k.as_str())).cloned().collect();
                for field in unknown {
                    table.remove(&field);
                    let hint = crate::hint::did_you_mean(&field, known.iter().copied());
                    self.warn(format!("unknown key `{key}.{field}` is ignored{hint}"));
                }
                toml::Value::Table(table)
            }
            other => other,
        };
        self.convert(key, &value)
    }

    /// A top-level key.
    pub fn top<T: DeserializeOwned>(&mut self, key: &'a str) -> Result<Option<T>, ManifestError> {
        self.used_top.insert(key);
        self.top.get(key).map(|v| self.convert(key, v)).transpose()
    }

    /// A required top-level key.
    pub fn required<T: DeserializeOwned>(&mut self, key: &'a str) -> Result<T, ManifestError> {
        self.top(key)?.ok_or_else(|| self.error(key, ManifestErrorKind::Missing))
    }

    /// A key of `[hooks]` only (hook script paths).
    pub fn hooks_entry<T: DeserializeOwned>(&mut self, key: &'a str) -> Result<Option<T>, ManifestError> {
        self.used_hooks.insert(key);
        let Some(hooks) = self.hooks else { return Ok(None) };
        hooks.get(key).map(|v| self.convert(&format!("hooks.{key}"), v)).transpose()
    }

    /// An execution setting from either placement; `[hooks]` wins with a
    /// warning when both are set. Also returns the key path that was used.
    pub fn setting<T: DeserializeOwned>(&mut self, key: &'a str) -> Result<Option<(T, String)>, ManifestError> {
        self.used_top.insert(key);
        self.used_hooks.insert(key);
        let in_hooks = self.hooks.and_then(|h| h.get(key));
        let at_top = self.top.get(key);
        if in_hooks.is_some() && at_top.is_some() {
            self.warn(format!("`{key}` is set both at the top level and in [hooks]; using the [hooks] value"));
        }
        match (in_hooks, at_top) {
            (Some(v), _) => {
                let path = format!("hooks.{key}");
                Ok(Some((self.convert(&path, v)?, path)))
            }
            (None, Some(v)) => Ok(Some((self.convert(key, v)?, key.to_owned()))),
            (None, None) => Ok(None),
        }
    }

    /// Keys nobody read: returned (top-level ones, and `[hooks]` ones under
    /// `hooks`) so they are kept, with one warning each.
    pub fn finish(mut self, top_known: &[&str], hooks_known: &[&str]) -> (toml::Table, Vec<String>) {
        let mut unknown = toml::Table::new();
        let mut warnings = std::mem::take(&mut self.warnings);
        for (key, value) in self.top {
            if self.used_top.contains(key.as_str()) {
                continue;
            }
            let hint = crate::hint::did_you_mean(key, top_known.iter().copied());
            warnings.push(describe_unknown(key, hint));
            unknown.insert(key.clone(), value.clone());
        }
        if let Some(hooks) = self.hooks {
            let mut unknown_hooks = toml::Table::new();
            for (key, value) in hooks {
                if self.used_hooks.contains(key.as_str()) {
                    continue;
                }
                let hint = crate::hint::did_you_mean(key, hooks_known.iter().copied());
                warnings.push(describe_unknown(&format!("hooks.{key}"), hint));
                unknown_hooks.insert(key.clone(), value.clone());
            }
            if !unknown_hooks.is_empty() {
                unknown.insert("hooks".into(), toml::Value::Table(unknown_hooks));
            }
        }
        (unknown, warnings)
    }
}

/// LibreFang keys outside the spec's table that ctxhost does not act on
/// (warned about as such, at the top level or in `[hooks]`).
pub const LIBREFANG_ONLY: &[&str] =
    &["hook_protocol_version", "hook_schemas", "env_schema", "enable_shared_state", "otel_endpoint", "allowed_secrets"];

fn describe_unknown(key: &str, hint: String) -> String {
    let bare = key.rsplit('.').next().unwrap_or(key);
    if LIBREFANG_ONLY.contains(&bare) {
        format!("key `{key}` is a LibreFang setting that ctxhost does not support; it is ignored")
    } else {
        format!("unknown key `{key}` is ignored{hint}")
    }
}
