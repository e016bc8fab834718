//! The `host` import of the `context-plugin` world: `log` (to tracing,
//! target `plugin_log`), `config-get` (the plugin's resolved `[config]`),
//! `storage-*` and `emit-event`.
//!
//! Storage is a cap-std [`Dir`](cap_std::fs::Dir) on the plugin's data dir:
//! keys become hex file names (`kv-…`), so no key can name a path, and every
//! write is held to `services::quota` (the one storage quota), counted under
//! one lock per runner. Owns that storage. Never opens a path outside the
//! data dir and never lets a write pass the quota.

use std::sync::Arc;

use serde_json::Value;

use super::bindings::ctxhost::plugin::{host, types as wit};
use super::store::State;
use crate::host::services::quota;

impl wit::Host for State {}

impl State {
    fn storage(&self) -> Result<cap_std::fs::Dir, String> {
        std::fs::create_dir_all(&self.data_dir).map_err(|e| format!("storage unavailable: {e}"))?;
        cap_std::fs::Dir::open_ambient_dir(&self.data_dir, cap_std::ambient_authority())
            .map_err(|e| format!("storage unavailable: {e}"))
    }
}

/// What a component's `host.storage-*` storage holds: counted from its files
/// at the runner's first storage call, then kept as values are written and
/// removed (under one lock, so concurrent calls cannot both take the last
/// key). The data dir is the plugin's own; a reload counts afresh.
#[derive(Debug, Clone, Copy)]
pub(super) struct StorageUsage {
    keys: usize,
    bytes: usize,
}

/// The usage of one runner's storage, shared by its calls.
pub(super) type SharedUsage = Arc<std::sync::Mutex<Option<StorageUsage>>>;

/// The storage files (`kv-…`) in `dir`: how many, and their bytes.
fn scan_storage(dir: &cap_std::fs::Dir) -> Result<StorageUsage, String> {
    let mut usage = StorageUsage { keys: 0, bytes: 0 };
    for entry in dir.entries().map_err(|e| format!("storage unavailable: {e}"))? {
        let entry = entry.map_err(|e| format!("storage unavailable: {e}"))?;
        if !entry.file_name().to_string_lossy().starts_with(KEY_PREFIX) {
            continue;
        }
        let meta = entry.metadata().map_err(|e| format!("storage unavailable: {e}"))?;
        if meta.is_file() {
            usage.keys += 1;
            usage.bytes = usage.bytes.saturating_add(usize::try_from(meta.len()).unwrap_or(usize::MAX));
        }
    }
    Ok(usage)
}

/// The size of the value stored in `file`, if there is one.
fn stored_size(dir: &cap_std::fs::Dir, file: &str) -> Option<usize> {
    let meta = dir.symlink_metadata(file).ok()?;
    meta.is_file().then(|| usize::try_from(meta.len()).unwrap_or(usize::MAX))
}

const KEY_PREFIX: &str = "kv-";

/// The longest storage key: its file name (`kv-` and two hex digits a
/// byte) must fit the 255-byte file-name limit.
pub const STORAGE_KEY_BYTES: usize = (255 - KEY_PREFIX.len()) / 2;

/// A storage key as a file name: hex, so it can never be a path.
fn key_file(key: &str) -> Result<String, String> {
    if key.len() > STORAGE_KEY_BYTES {
        return Err(format!(
            "storage key of {} bytes is too long: a key may hold at most {STORAGE_KEY_BYTES} bytes \
             (it is stored as a file name)",
            key.len()
        ));
    }
    Ok(format!("{KEY_PREFIX}{}", hex::encode(key.as_bytes())))
}

impl host::Host for State {
    fn log(&mut self, level: host::Level, message: String) {
        let plugin = self.plugin.as_str();
        match level {
            host::Level::Trace => tracing::trace!(target: "plugin_log", plugin, "{message}"),
            host::Level::Debug => tracing::debug!(target: "plugin_log", plugin, "{message}"),
            host::Level::Info => tracing::info!(target: "plugin_log", plugin, "{message}"),
            host::Level::Warn => tracing::warn!(target: "plugin_log", plugin, "{message}"),
            host::Level::Error => tracing::error!(target: "plugin_log", plugin, "{message}"),
        }
    }

    fn config_get(&mut self, key: String) -> Option<String> {
        self.config.get(&key).map(Value::to_string)
    }

    fn storage_get(&mut self, key: String) -> Option<Vec<u8>> {
        self.storage().ok()?.read(key_file(&key).ok()?).ok()
    }

    /// Held to the storage quota of `services` ([`quota::check_storage_write`]).
    fn storage_set(&mut self, key: String, value: Vec<u8>) -> Result<(), String> {
        let file = key_file(&key)?;
        let dir = self.storage()?;
        let mut shared = self.storage_usage.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let usage = match *shared {
            Some(usage) => usage,
            None => *shared.insert(scan_storage(&dir)?),
        };
        let replaced = stored_size(&dir, &file);
        quota::check_storage_write(&self.plugin, &key, value.len(), replaced, usage.keys, usage.bytes)?;
        match dir.write(&file, &value) {
            Ok(()) => {
                *shared = Some(StorageUsage {
                    keys: usage.keys + usize::from(replaced.is_none()),
                    bytes: usage.bytes.saturating_sub(replaced.unwrap_or(0)) + value.len(),
                });
                Ok(())
            }
            Err(e) => {
                *shared = None; // a partial write: count again next time
                Err(format!("storage key `{key}`: {e}"))
            }
        }
    }

    fn storage_delete(&mut self, key: String) -> Result<(), String> {
        let file = key_file(&key)?;
        let dir = self.storage()?;
        let mut shared = self.storage_usage.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let replaced = stored_size(&dir, &file);
        match dir.remove_file(&file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(format!("storage key `{key}`: {e}")),
            _ => {
                if let (Some(usage), Some(size)) = (shared.as_mut(), replaced) {
                    usage.keys = usage.keys.saturating_sub(1);
                    usage.bytes = usage.bytes.saturating_sub(size);
                }
                Ok(())
            }
        }
    }

    fn emit_event(&mut self, name: String, payload: String) {
        tracing::debug!(target: "plugin_log", plugin = self.plugin.as_str(), "event `{name}`: {payload}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_keys_longer_than_a_file_name_allows_are_refused() {
        let longest = "k".repeat(STORAGE_KEY_BYTES);
        assert_eq!(key_file(&longest).unwrap().len(), 255);
        let err = key_file(&format!("{longest}k")).unwrap_err();
        assert!(err.contains(&format!("at most {STORAGE_KEY_BYTES} bytes")), "{err}");
    }
}
