//! What a change made through another instance on the same store means to
//! this daemon: it reads the store's change feed (`host::store::feed`) from
//! the last id it saw, each time the listener wakes it (a change committed,
//! or the listening connection (re)connected: the catch-up), and applies the
//! entries of other instances in id order:
//! - `config`: the plugin's view of its config takes the values and its
//!   `config_changed` fires once per value, in order (as a set here would);
//! - `enable`, `grant`, `reload`: the plugin is reloaded from this
//!   instance's own files ([`super::reload`]), which reads the enable
//!   choice and the grant from the store.
//!
//! Its own entries (same origin) were applied when they were made. Only a
//! daemon on a store with a feed (PostgreSQL) runs this; on SQLite nothing
//! changes. Must never: store a change itself, or announce what it applies
//! (an instance applying a reload would otherwise make every other one
//! reload again).

use std::sync::{Arc, Weak};

use serde_json::Value;

use super::AppState;
use crate::host::store::feed::{ChangeKind, Feed, FeedEntry, Wake};
use crate::host::store::off_runtime;

/// Entries read per query.
const BATCH: usize = 256;

/// The running reader: stops (and stops listening) when dropped.
pub(crate) struct Follower {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts following `feed` after id `seen` (read before the plugins were
/// loaded, so nothing committed since is missed).
pub(crate) fn follow(state: &Arc<AppState>, feed: Arc<dyn Feed>, seen: i64) -> Follower {
    let mut listener = feed.listen();
    let state = Arc::downgrade(state);
    let task = tokio::spawn(async move {
        let _stop = listener.stop;
        let mut seen = seen;
        while listener.wakes.recv().await.is_some() {
            // Wakes that came meanwhile are answered by this read too.
            while let Ok(wake) = listener.wakes.try_recv() {
                if wake == Wake::Connected {
                    tracing::debug!("change feed reconnected: catching up after {seen}");
                }
            }
            if !catch_up(&state, &feed, &mut seen).await {
                return;
            }
        }
    });
    Follower { task }
}

/// Reads and applies every entry after `seen`; false when the daemon is gone.
async fn catch_up(state: &Weak<AppState>, feed: &Arc<dyn Feed>, seen: &mut i64) -> bool {
    loop {
        let (reader, after) = (feed.clone(), *seen);
        let entries = match off_runtime("feed_after", move || reader.after(after, BATCH)).await {
            Ok(Ok(entries)) => entries,
            Ok(Err(e)) | Err(e) => {
                // The next wake (a reconnect at the latest) reads again.
                tracing::warn!("cannot read the change feed: {e}");
                return true;
            }
        };
        let full = entries.len() == BATCH;
        for entry in entries {
            *seen = entry.id;
            if entry.origin == feed.origin() {
                continue;
            }
            let Some(state) = state.upgrade() else { return false };
            apply(&state, entry).await;
        }
        if !full {
            return true;
        }
    }
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
        Some(kind @ (ChangeKind::Enable | ChangeKind::Grant | ChangeKind::Reload)) => {
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
                Err(e) => tracing::warn!("{} of plugin '{name}' through another instance: {e}", kind.as_str()),
            }
        }
        None => tracing::debug!("change {}: a kind this ctxhost does not know; skipped", entry.id),
    }
}
