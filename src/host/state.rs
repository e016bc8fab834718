//! Which installed plugins the operator turned off: `<home>/plugins-state.toml`
//! (`disabled = ["name", …]`, and `enabled = […]` for plugins turned on
//! explicitly). A plugin not listed follows its manifest: enabled, unless
//! its plugin.json says `"enabled": false`. This module
//! only keeps the list; the engine and the server decide what "disabled"
//! means for them (left out of the stack).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::filestore::{self as store, StoreError};
use crate::home::Home;

const HEADER: &str = "# Plugins turned off with `ctxhost plugin disable`, written by ctxhost.\n\n";

#[derive(Debug, Default, Serialize, Deserialize)]
struct StateFile {
    #[serde(default)]
    disabled: BTreeSet<String>,
    /// Turned on explicitly: overrides a plugin.json's `"enabled": false`.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    enabled: BTreeSet<String>,
}

/// What the operator said about a plugin, if anything.
pub fn choice(home: &Home, name: &str) -> Result<Option<bool>, StoreError> {
    let file = store::read::<StateFile>(&home.state_file())?;
    Ok(if file.disabled.contains(name) {
        Some(false)
    } else if file.enabled.contains(name) {
        Some(true)
    } else {
        None
    })
}

/// The disabled plugins.
///
/// # Errors
/// The state file exists but cannot be read.
pub fn disabled(home: &Home) -> Result<BTreeSet<String>, StoreError> {
    Ok(store::read::<StateFile>(&home.state_file())?.disabled)
}

/// Turns `name` on or off; returns whether that changed anything.
///
/// # Errors
/// The state file cannot be read, locked or written.
pub fn set_enabled(home: &Home, name: &str, enabled: bool) -> Result<bool, StoreError> {
    store::update(&home.state_file(), HEADER, |file: &mut StateFile| {
        let changed = if enabled {
            let a = file.disabled.remove(name);
            file.enabled.insert(name.to_owned()) || a
        } else {
            let a = file.enabled.remove(name);
            file.disabled.insert(name.to_owned()) || a
        };
        (changed, changed)
    })
}
