//! Following a shared store's change feed (`host::store::feed`): the
//! reading loop every long-running front end shares (`ctxhost serve`,
//! `ctxhost sidecar`). It reads the feed from the last id seen each time
//! the listener wakes it (a change committed, or the listening connection
//! (re)connected: the catch-up) and hands the entries other instances made
//! to the front end's `apply`, one at a time, in id order.
//!
//! What an entry means to a front end (fire `config_changed`, reload a
//! plugin) is the front end's; this module only reads, skips the process's
//! own entries (applied when made) and decides whether an `adopt` entry
//! changes anything here ([`adopt_changes`]). Must never append to the
//! feed: an instance that announced what it applied would make every other
//! one apply it again.

use std::future::Future;
use std::sync::Arc;

use super::catalog::{Catalog, State, content};
use crate::host::LoadContext;
use crate::host::store::feed::{Feed, FeedEntry, Wake};
use crate::host::store::off_runtime;

/// Entries read per query.
const BATCH: usize = 256;

/// The running reader: stops (and stops listening) when dropped.
pub struct Follower {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts following `feed` after id `seen` (read before the plugins were
/// loaded, so nothing committed since is missed): `apply` gets each entry
/// another process made, in order, and answers false when its front end is
/// gone (the reader stops). Needs a tokio runtime.
pub fn follow<A, F>(feed: Arc<dyn Feed>, seen: i64, apply: A) -> Follower
where
    A: Fn(FeedEntry) -> F + Send + Sync + 'static,
    F: Future<Output = bool> + Send,
{
    let mut listener = feed.listen();
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
            if !catch_up(&feed, &mut seen, &apply).await {
                return;
            }
        }
    });
    Follower { task }
}

/// Reads and applies every entry after `seen`; false when the front end is gone.
async fn catch_up<A, F>(feed: &Arc<dyn Feed>, seen: &mut i64, apply: &A) -> bool
where
    A: Fn(FeedEntry) -> F,
    F: Future<Output = bool>,
{
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
            if !apply(entry).await {
                return false;
            }
        }
        if !full {
            return true;
        }
    }
}

/// Whether an `adopt` entry of plugin `name` (`payload` `{"hash", …}`)
/// changes anything on this instance, whose catalog is `catalog`: it does
/// unless the plugin runs here from files that hash to the adopted version
/// and are still the files on disk. When it does, the front end reloads
/// the plugin with [`super::catalog::fleet::Rule::Record`], which re-hashes
/// and compares: the plugin resumes, or is refused. Blocks (hashes files).
pub fn adopt_changes(catalog: &Catalog, cx: &LoadContext<'_>, name: &str, payload: &serde_json::Value) -> bool {
    let Some(adopted) = payload.get("hash").and_then(serde_json::Value::as_str) else { return true };
    let Some(entry) = catalog.entry(name) else { return true };
    let running = entry.status.state == State::Loaded && entry.status.content_hash.as_deref() == Some(adopted);
    let on_disk = content::content_hash(&cx.home.plugins_dir().join(name));
    !(running && on_disk.as_deref().ok() == Some(adopted))
}
