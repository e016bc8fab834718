//! Which installed plugins the operator turned off: `<home>/plugins-state.toml`
//! (`disabled = ["name", …]`). A plugin not listed is enabled. This module
//! only keeps the list; the engine and the server decide what "disabled"
//! means for them (left out of the stack).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::store::{self, StoreError};
use crate::home::Home;

const HEADER: &str = "# Plugins turned off with `ctxhost plugin disable`, written by ctxhost.\n\n";

#[derive(Debug, Default, Serialize, Deserialize)]
struct StateFile {
    #[serde(default)]
    disabled: BTreeSet<String>,
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
        let changed = if enabled { file.disabled.remove(name) } else { file.disabled.insert(name.to_owned()) };
        (changed, changed)
    })
}
