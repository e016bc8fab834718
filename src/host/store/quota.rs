//! What one plugin may keep in the host's stores: a misbehaving plugin must
//! not fill the host's memory or disk. The limits, and the one check of each
//! kind; the stores run the checks inside the change's transaction
//! ([`super::Store::vfs_put`], [`super::Store::storage_put`],
//! [`super::Store::trigger_put`]), a component's `host.storage-*` runs
//! [`check_storage_write`] over its own files. Refusals name the limit.

/// Bytes of one vfs file.
pub const VFS_FILE_BYTES: usize = 4 * 1024 * 1024;
/// Bytes of all of one plugin's vfs files.
pub const VFS_PLUGIN_BYTES: usize = 16 * 1024 * 1024;
/// vfs nodes of one plugin.
pub const VFS_PLUGIN_NODES: usize = 10_000;
/// Bytes of one storage value (as JSON).
pub const STORAGE_VALUE_BYTES: usize = 1024 * 1024;
/// Keys of one plugin's storage, all scopes.
pub const STORAGE_KEYS: usize = 10_000;
/// Bytes of all of one plugin's storage values.
pub const STORAGE_PLUGIN_BYTES: usize = 16 * 1024 * 1024;
/// Triggers one plugin owns.
pub const TRIGGERS: usize = 1_000;

/// The vfs limits of one plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VfsLimits {
    pub file_bytes: usize,
    pub plugin_bytes: usize,
    pub plugin_nodes: usize,
}

/// The limits every plugin gets.
pub const VFS: VfsLimits =
    VfsLimits { file_bytes: VFS_FILE_BYTES, plugin_bytes: VFS_PLUGIN_BYTES, plugin_nodes: VFS_PLUGIN_NODES };

impl VfsLimits {
    /// Whether `owner`, keeping `nodes` nodes and `bytes` bytes besides the
    /// node at `path`, may put a node of `new_bytes` there.
    ///
    /// # Errors
    /// The refusal, naming the path or plugin and the limit.
    pub fn check(&self, owner: &str, path: &str, new_bytes: usize, nodes: usize, bytes: usize) -> Result<(), String> {
        if new_bytes > self.file_bytes {
            return Err(format!("{path}: {new_bytes} bytes; a vfs file may hold at most {} bytes", self.file_bytes));
        }
        let (nodes, bytes) = (nodes.saturating_add(1), bytes.saturating_add(new_bytes));
        if nodes > self.plugin_nodes || bytes > self.plugin_bytes {
            return Err(format!(
                "plugin '{owner}' would keep {nodes} vfs nodes and {bytes} bytes; the most it may keep is {} nodes \
                 and {} bytes",
                self.plugin_nodes, self.plugin_bytes
            ));
        }
        Ok(())
    }
}

/// The storage limits of one plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StorageLimits {
    pub value_bytes: usize,
    pub keys: usize,
    pub plugin_bytes: usize,
}

/// The limits every plugin gets.
pub const STORAGE: StorageLimits =
    StorageLimits { value_bytes: STORAGE_VALUE_BYTES, keys: STORAGE_KEYS, plugin_bytes: STORAGE_PLUGIN_BYTES };

impl StorageLimits {
    /// Whether storing a value of `value_bytes` under `key` keeps `plugin`
    /// within these limits, in a storage holding `keys` keys and `bytes`
    /// bytes of values; `replaced` is the size of the value `key` holds now,
    /// if any.
    ///
    /// # Errors
    /// The refusal, naming the plugin or key and the limit.
    pub fn check(
        &self,
        plugin: &str,
        key: &str,
        value_bytes: usize,
        replaced: Option<usize>,
        keys: usize,
        bytes: usize,
    ) -> Result<(), String> {
        if value_bytes > self.value_bytes {
            return Err(format!(
                "storage value `{key:.80}` is {value_bytes} bytes; a value may hold at most {} bytes",
                self.value_bytes
            ));
        }
        if replaced.is_none() && keys >= self.keys {
            return Err(format!("plugin '{plugin}' has {keys} storage keys already, the most it may keep"));
        }
        // A write that does not grow the storage passes (a storage over the
        // quota, written before it existed, can still shrink).
        let after = bytes.saturating_sub(replaced.unwrap_or(0)).saturating_add(value_bytes);
        if after > self.plugin_bytes && value_bytes > replaced.unwrap_or(0) {
            return Err(format!(
                "plugin '{plugin}' would keep {after} bytes of storage values; the most it may keep is {} bytes",
                self.plugin_bytes
            ));
        }
        Ok(())
    }
}

/// [`StorageLimits::check`] with the limits every plugin gets: the one check
/// of every storage a plugin writes (the `services` storage and a
/// component's `host.storage-*`).
///
/// # Errors
/// The refusal, naming the plugin or key and the limit.
pub fn check_storage_write(
    plugin: &str,
    key: &str,
    value_bytes: usize,
    replaced: Option<usize>,
    keys: usize,
    bytes: usize,
) -> Result<(), String> {
    STORAGE.check(plugin, key, value_bytes, replaced, keys, bytes)
}

/// The refusal when `plugin`, owning `owned` triggers, adds one more past `max`.
pub fn triggers_refusal(plugin: &str, owned: usize) -> String {
    format!("plugin '{plugin}' has {owned} triggers already, the most it may keep")
}
