//! What a change made through another instance on the same store means to
//! this daemon: it reads the store's change feed (`host::store::feed`) from
//! the last id it saw, each time the listener wakes it (a change committed,
//! or the listening connection (re)connected: the catch-up), and applies the
//! entries of other instances in id order:
//! - `config`: the plugin's view of its config takes the values and its
//!   `config_changed` fires once per value, in order (as a set here would);
//! - `enable`, `grant`, `reload`: the plugin is reloaded from this
//!   instance's own files ([`super::reload`]), which reads the enable
//!   choice and the grant from the store, and compares their hash with the
//!   fleet's version (files that differ: the plugin is refused);
//! - `adopt`: a new fleet version; the plugin is reloaded likewise unless
//!   it already runs from files of that version (it resumes, or is refused).
//!
//! Its own entries (same origin) were applied when they were made. Only a
//! daemon on a store with a feed (PostgreSQL) runs this; on SQLite nothing
//! changes. Must never: store a change itself, or announce what it applies
//! (an instance applying a reload would otherwise make every other one
//! reload again).

use std::sync::{Arc, Weak};

use serde_json::Value;

use super::AppState;
use crate::app::follow::{Follower, adopt_changes};
use crate::host::store::feed::{ChangeKind, Feed, FeedEntry};
use crate::host::store::off_runtime;

/// Starts following `feed` after id `seen` (read before the plugins were
/// loaded, so nothing committed since is missed).
pub(crate) fn follow(state: &Arc<AppState>, feed: Arc<dyn Feed>, seen: i64) -> Follower {
    let state: Weak<AppState> = Arc::downgrade(state);
    crate::app::follow::follow(feed, seen, move |entry| {
        let state = state.clone();
        async move {
            let Some(state) = state.upgrade() else { return false };
            apply(&state, entry).await;
            true
        }
    })
}

/// Applies one entry another instance made.
async fn apply(state: &Arc<AppState>, entry: FeedEntry) {
    let name = entry.plugin.as_str();
    match entry.kind {
        Some(ChangeKind::Config) => {
            let Some(plugin) = state.agent.plugin(name) else { return };
            let Some(values) = entry.payload.get("values").and_then(Value::as_object) else {
                tracing::warn!("change {}: a config change of plugin '{name}' without values; skipped", entry.id);
                return;
            };
            if let Err(e) = plugin.services.config_set_elsewhere(values).await {
                tracing::warn!("plugin '{name}': config set by another instance: {e}");
            }
        }
        Some(kind @ (ChangeKind::Enable | ChangeKind::Grant | ChangeKind::Reload | ChangeKind::Adopt)) => {
            if kind == ChangeKind::Adopt {
                let (looker, plugin, payload) = (state.clone(), name.to_owned(), entry.payload.clone());
                let changes = off_runtime("feed_adopt", move || {
                    adopt_changes(&looker.catalog, &looker.load_context(), &plugin, &payload)
                })
                .await;
                if matches!(changes, Ok(false)) {
                    tracing::debug!(plugin = %name, "adopted elsewhere: already runs that version");
                    return;
                }
            }
            match super::reload::reload(state, name).await {
                Ok(done) => tracing::info!(
                    plugin = %name,
                    active = done.active,
                    "reloaded: {} through another instance",
                    kind.as_str()
                ),
                Err(super::reload::ReloadError::NotFound { .. }) => {
                    tracing::debug!(plugin = %name, "{} through another instance: not installed here", kind.as_str());
                }
                Err(super::reload::ReloadError::Refused(refusal)) => {
                    tracing::warn!(plugin = %name, "{} through another instance: refused here: {refusal}", kind.as_str());
                }
                Err(e) => tracing::warn!("{} of plugin '{name}' through another instance: {e}", kind.as_str()),
            }
        }
        None => tracing::debug!("change {}: a kind this ctxhost does not know; skipped", entry.id),
    }
}
