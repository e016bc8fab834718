//! Which installed plugins the operator turned off or on: kept in the home's
//! state store (`host::store`, `plugin_state`; before it,
//! `<home>/plugins-state.toml`, imported once). A plugin with no choice
//! follows its manifest: enabled, unless its plugin.json says
//! `"enabled": false`. This module only keeps the choices; the engine and the
//! server decide what "disabled" means for them (left out of the stack).
//!
//! Every function blocks (a store call, no file lock): on the async runtime,
//! call it through `host::store::off_runtime`. Reading a home without any
//! state creates nothing.

use std::collections::BTreeSet;

use super::filestore::StoreError;
use crate::home::Home;

fn failed(home: &Home, action: &'static str) -> impl FnOnce(crate::host::store::StoreError) -> StoreError {
    let path = home.state_db();
    move |e| StoreError { path, action, reason: e.to_string() }
}

/// What the operator said about a plugin, if anything.
///
/// # Errors
/// The state store cannot be opened or read.
pub fn choice(home: &Home, name: &str) -> Result<Option<bool>, StoreError> {
    if !crate::host::store::exists(home) {
        return Ok(None);
    }
    let store = crate::host::store::open(home).map_err(failed(home, "failed to read"))?;
    store.plugin_choice(name).map_err(failed(home, "failed to read"))
}

/// The disabled plugins.
///
/// # Errors
/// The state store cannot be opened or read.
pub fn disabled(home: &Home) -> Result<BTreeSet<String>, StoreError> {
    if !crate::host::store::exists(home) {
        return Ok(BTreeSet::new());
    }
    let store = crate::host::store::open(home).map_err(failed(home, "failed to read"))?;
    let choices = store.plugin_choices().map_err(failed(home, "failed to read"))?;
    Ok(choices.into_iter().filter(|(_, on)| !on).map(|(name, _)| name).collect())
}

/// Turns `name` on or off; returns whether that changed anything.
///
/// # Errors
/// The state store cannot be opened or written.
pub fn set_enabled(home: &Home, name: &str, enabled: bool) -> Result<bool, StoreError> {
    let store = crate::host::store::open(home).map_err(failed(home, "failed to write"))?;
    store.set_plugin_choice(name, enabled).map_err(failed(home, "failed to write"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_are_kept_and_a_fresh_home_stays_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path().join("home"));
        assert_eq!(choice(&home, "a").unwrap(), None);
        assert!(disabled(&home).unwrap().is_empty());
        assert!(!home.root().exists(), "reading created nothing");

        assert!(set_enabled(&home, "a", false).unwrap());
        assert!(!set_enabled(&home, "a", false).unwrap(), "no change");
        assert!(set_enabled(&home, "b", true).unwrap());
        assert_eq!((choice(&home, "a").unwrap(), choice(&home, "b").unwrap()), (Some(false), Some(true)));
        assert_eq!(disabled(&home).unwrap(), BTreeSet::from(["a".to_owned()]));
        assert!(set_enabled(&home, "a", true).unwrap());
        assert!(disabled(&home).unwrap().is_empty());
    }
}
