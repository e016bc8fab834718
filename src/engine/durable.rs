//! Durable `after_turn`: a turn's plugin calls go through the journal
//! ([`crate::host::store::journal`]). The stack journals one entry per plugin
//! that takes the turn before it acknowledges the turn; entries run from the
//! journal, leave it when the plugin answered, are retried after the
//! journal's policy when it failed, and stay as dead letters after the last
//! attempt. What a killed process left (held or waiting) is run by the next
//! process on the same state.
//!
//! One entry per plugin (not one per turn): each plugin's entry is claimed,
//! retried and dead-lettered on its own, so a failing plugin neither blocks
//! nor re-runs the others, and a replay never calls a plugin that already
//! answered.
//!
//! Owns the pump (claims due entries of this stack's plugins within each
//! plugin's `after_turn_queue_depth` and its circuit breaker), the run of one
//! entry, lease renewal, and the release of entries whose owner died on this
//! host. Must never write the turn to the built-in memory (the stack does,
//! before the acknowledgement; its writes are idempotent) or touch the
//! journal on an async worker thread.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{Notify, OwnedSemaphorePermit};
use tokio::task::JoinHandle;

use super::default::DefaultEngine;
use super::layer::{BreakerGate, Layer, LayerFailure};
use super::stack::StackLayer;
use crate::config::ContextEngineConfig;
use crate::home::Home;
use crate::host::store::journal::{
    Claimed, EntryId, FailOutcome, Journal, JournalError, Lease, NewEntry, Owner, RetryPolicy,
};
use crate::manifest::FailurePolicy;
use crate::metrics::{JournalEvent, Metrics};
use crate::protocol::{AfterTurnReply, HookName, HookRequest};

/// How long a claim holds an entry unless renewed (renewed every third of it).
pub const LEASE: Duration = Duration::from_secs(60);

/// How often the pump looks for entries whose owner died on this host, and
/// for entries it was not told about (another process journaled them).
const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// Entries one claim takes for one plugin at most.
const BATCH: usize = 16;

/// A journal error is logged at most this often by the pump.
const ERROR_LOG_EVERY: Duration = Duration::from_secs(60);

/// The journal of `home` (in `<home>/state.db`, or the PostgreSQL store its
/// `[store] url` names), retrying after `[context_engine]`
/// `after_turn_max_attempts` and `after_turn_retry_ms`. Blocks.
///
/// # Errors
/// The file or database cannot be opened as the journal.
pub fn open_journal(home: &Home, config: &ContextEngineConfig) -> Result<Arc<dyn Journal>, JournalError> {
    let policy = RetryPolicy {
        max_attempts: config.after_turn_max_attempts.max(1),
        backoff: Duration::from_millis(config.after_turn_retry_ms),
        max_backoff: MAX_BACKOFF,
    };
    crate::host::store::open_journal(home, policy)
}

/// The longest wait between two attempts of a journaled call.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// `after_turn` calls under way, with their agent (settles wait on them).
pub(super) type Pending = Arc<Mutex<Vec<(String, JoinHandle<()>)>>>;

/// The journal as the stack uses it: where entries go, whose they are.
pub(super) struct Durable {
    journal: Arc<dyn Journal>,
    lease: Lease,
    /// Wakes the pump: a slot freed, an entry waits, a layer came back.
    wake: Notify,
}

impl Durable {
    pub(super) fn new(journal: Arc<dyn Journal>) -> Durable {
        Durable { journal, lease: Lease { owner: Owner::this_process(), duration: LEASE }, wake: Notify::new() }
    }

    pub(super) fn wake(&self) {
        self.wake.notify_one();
    }

    /// Runs `f` on the journal off the async threads.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn Journal, &Lease) -> Result<T, JournalError> + Send + 'static,
    ) -> Result<T, JournalError> {
        let (journal, lease) = (self.journal.clone(), self.lease.clone());
        let location = journal.location();
        tokio::task::spawn_blocking(move || f(&*journal, &lease))
            .await
            .unwrap_or_else(|e| Err(JournalError { location, op: "run a journal task", source: Box::new(e) }))
    }

    /// Journals `entries` (durable when this returns); those with `run_now`
    /// are held by this process.
    pub(super) async fn append(&self, entries: Vec<NewEntry>) -> Result<Vec<EntryId>, JournalError> {
        self.blocking(move |j, lease| j.append(&entries, lease)).await
    }
}

/// What runs journal entries: the stack's parts the pump and each run share.
#[derive(Clone)]
pub(super) struct Dispatch {
    pub durable: Arc<Durable>,
    pub layers: Arc<[StackLayer]>,
    pub default: DefaultEngine,
    pub metrics: Arc<Metrics>,
    pub pending: Pending,
}

/// One plugin's `after_turn` of `req`, the plugin's memories stored in the
/// built-in memory (idempotent: a memory already stored is not stored twice).
/// `Ok` when the plugin answered (or does not take part).
pub(super) async fn call_after_turn(
    layer: &Layer,
    req: &HookRequest,
    default: &DefaultEngine,
    agent: &str,
) -> Result<(), LayerFailure> {
    if let Some(reply) = layer.call(req).await? {
        let memories = AfterTurnReply::from_value(&reply).map(|r| r.memories).unwrap_or_default();
        if !memories.is_empty()
            && let Err(e) = default.store_plugin_memories(agent, &memories, layer.name()).await
        {
            tracing::warn!(plugin = %layer.name(), "could not store the plugin's memories: {e}");
        }
    }
    Ok(())
}

impl Dispatch {
    /// Starts a run of `entry` on `layer` — in the after_turn slot given, or
    /// in the next one free —, counted in the pending calls of its agent.
    pub(super) fn spawn(&self, layer: Arc<Layer>, slot: Option<OwnedSemaphorePermit>, entry: Claimed) {
        let agent = entry.agent.clone();
        let handle = tokio::spawn(self.clone().run(layer, slot, entry));
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        pending.retain(|(_, h)| !h.is_finished());
        pending.push((agent, handle));
    }

    async fn run(self, layer: Arc<Layer>, slot: Option<OwnedSemaphorePermit>, entry: Claimed) {
        let slot = match slot {
            Some(s) => Some(s),
            None => layer.after_turn_slot_wait().await,
        };
        let result = match serde_json::from_str(&entry.payload)
            .map_err(|e| e.to_string())
            .and_then(|v| HookRequest::from_json(HookName::AfterTurn, v).map_err(|e| e.to_string()))
        {
            Ok(req) => {
                call_after_turn(&layer, &req, &self.default, &entry.agent).await.map_err(|f| (f.policy, f.message))
            }
            Err(e) => Err((FailurePolicy::Warn, format!("the journaled request cannot be read: {e}"))),
        };
        drop(slot);
        let (id, plugin) = (entry.id, layer.name().to_owned());
        match result {
            Ok(()) => {
                if let Err(e) = self.durable.blocking(move |j, _| j.complete(id)).await {
                    tracing::warn!(%plugin, "after_turn done, but it could not be removed from the journal (it may run again): {e}");
                }
            }
            Err((policy, message)) => {
                let error = message.clone();
                match self.durable.blocking(move |j, lease| j.fail(id, &lease.owner, &error)).await {
                    Ok(FailOutcome::Retry { at, attempts }) => {
                        let wait = at.duration_since(SystemTime::now()).unwrap_or_default();
                        if policy == FailurePolicy::Skip {
                            tracing::debug!(%plugin, "after_turn attempt {attempts} failed: {message}; retried in {wait:.1?}");
                        } else {
                            tracing::warn!(%plugin, "after_turn attempt {attempts} failed: {message}; retried in {wait:.1?}");
                        }
                    }
                    Ok(FailOutcome::Dead { attempts }) => {
                        self.metrics.record_journal(JournalEvent::DeadLetter);
                        tracing::error!(
                            %plugin, agent = %entry.agent, entry = id,
                            "after_turn failed {attempts} times; the turn is kept as a dead letter in the journal `{}`: {message}",
                            self.durable.journal.location()
                        );
                    }
                    Ok(FailOutcome::NotHeld) => {
                        tracing::debug!(%plugin, entry = id, "after_turn failed after its lease was lost: {message}");
                    }
                    Err(e) => {
                        tracing::warn!(%plugin, "after_turn failed ({message}), and the journal could not record it: {e}")
                    }
                }
            }
        }
        self.durable.wake();
    }

    /// Claims what is due for every running plugin of the stack and starts
    /// it. Returns how long the pump may sleep unless woken.
    async fn fill(&self, errors: &mut ErrorLog) -> Duration {
        let mut wait = SWEEP_EVERY;
        let now = Instant::now();
        for slot in self.layers.iter() {
            let Some(layer) = slot.current() else { continue };
            let max = match layer.breaker_gate(HookName::AfterTurn) {
                BreakerGate::Closed => BATCH,
                BreakerGate::HalfOpen => 1,
                BreakerGate::Open { until } => {
                    // The trial's end wakes the pump (it is one of its runs).
                    wait = wait.min(until.map_or(SWEEP_EVERY, |u| u.saturating_duration_since(now)));
                    continue;
                }
            };
            // Slots are taken only once an entry is claimed: a turn arriving
            // meanwhile must find its slot free.
            let limit = layer.after_turn_slots_free().min(max);
            if limit == 0 {
                // A run ending frees a slot and wakes the pump.
                continue;
            }
            let targets = vec![slot.name().to_owned()];
            let claims = match self.durable.blocking(move |j, lease| j.claim(lease, limit, &targets)).await {
                Ok(c) => c,
                Err(e) => {
                    errors.log(&e);
                    wait = wait.min(Duration::from_secs(1));
                    continue;
                }
            };
            for d in &claims.dead_lettered {
                self.metrics.record_journal(JournalEvent::DeadLetter);
                tracing::error!(
                    plugin = %d.target, agent = %d.agent, entry = d.id,
                    "after_turn was interrupted at its last attempt ({}); the turn is kept as a dead letter",
                    d.last_error.as_deref().unwrap_or("no error recorded")
                );
            }
            if let Some(due) = claims.next_due {
                wait = wait.min(due.duration_since(SystemTime::now()).unwrap_or_default());
            }
            let me = self.durable.lease.owner.as_str();
            for entry in claims.entries {
                if entry.origin != me {
                    self.metrics.record_journal(JournalEvent::Replay);
                    tracing::info!(plugin = %entry.target, agent = %entry.agent, entry = entry.id, attempt = entry.attempt, "replaying a journaled after_turn");
                } else if entry.attempt > 1 {
                    self.metrics.record_journal(JournalEvent::Retry);
                }
                // Taken by a turn since the claim: it runs in the next free one.
                self.spawn(layer.clone(), layer.after_turn_slot(), entry);
            }
        }
        wait
    }

    /// Frees the entries of owners that died on this host, so they run now
    /// instead of when their lease ends.
    async fn sweep(&self, errors: &mut ErrorLog) {
        let released = self
            .durable
            .blocking(|j, lease| {
                let mut released = 0;
                for owner in j.owners()? {
                    if owner != lease.owner.as_str() && Owner::is_gone(&owner) {
                        released += j.release(&owner, &format!("interrupted: ctxhost process {owner} ended"))?;
                    }
                }
                Ok(released)
            })
            .await;
        match released {
            Ok(0) => {}
            Ok(n) => tracing::warn!(
                "{n} journaled after_turn calls were cut short by the end of a ctxhost process; they run again"
            ),
            Err(e) => errors.log(&e),
        }
    }

    async fn renew(&self, errors: &mut ErrorLog) {
        if let Err(e) = self.durable.blocking(|j, lease| j.renew(lease)).await {
            errors.log(&e);
        }
    }
}

/// Logs journal errors of the pump, at most once per [`ERROR_LOG_EVERY`].
#[derive(Default)]
struct ErrorLog {
    last: Option<Instant>,
}

impl ErrorLog {
    fn log(&mut self, e: &JournalError) {
        if self.last.is_none_or(|t| t.elapsed() >= ERROR_LOG_EVERY) {
            self.last = Some(Instant::now());
            tracing::warn!("after_turn journal: {e}; journaled calls wait until it works again");
        }
    }
}

/// The pump: at start it releases what dead processes held and runs what is
/// due (the replay); then it runs what becomes due, renews its leases, and
/// sweeps again now and then. Runs until aborted.
pub(super) async fn pump(d: Dispatch) {
    let mut errors = ErrorLog::default();
    let renew_every = LEASE / 3;
    let (mut swept, mut renewed) = (None::<Instant>, Instant::now());
    loop {
        if swept.is_none_or(|t| t.elapsed() >= SWEEP_EVERY) {
            d.sweep(&mut errors).await;
            swept = Some(Instant::now());
        }
        if renewed.elapsed() >= renew_every {
            d.renew(&mut errors).await;
            renewed = Instant::now();
        }
        let wait = d
            .fill(&mut errors)
            .await
            .min(renew_every.saturating_sub(renewed.elapsed()))
            // An entry due in a moment is not worth a spin.
            .max(Duration::from_millis(10));
        tokio::select! {
            () = d.durable.wake.notified() => {}
            () = tokio::time::sleep(wait) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::{Value, json};
    use tokio::sync::Semaphore;

    use super::*;
    use crate::engine::ContextEngine;
    use crate::engine::default::DefaultSettings;
    use crate::engine::stack::{StackEngine, StackSettings};
    use crate::host::store::journal::{EntryInfo, SqliteJournal};
    use crate::manifest::ExecSettings;
    use crate::protocol::{AfterTurnRequest, Message, Role};
    use crate::runner::{BoxFuture, CallOptions, HookError, Runner};

    /// Fails the first `fail` calls; each call first waits for a permit of `gate`.
    struct Plugin {
        calls: AtomicUsize,
        fail: usize,
        gate: Arc<Semaphore>,
    }

    impl Runner for Plugin {
        fn call<'a>(&'a self, _: &'a HookRequest, _: &'a CallOptions) -> BoxFuture<'a, Result<Value, HookError>> {
            Box::pin(async move {
                if let Ok(p) = self.gate.acquire().await {
                    p.forget();
                }
                let n = self.calls.fetch_add(1, Ordering::SeqCst);
                if n < self.fail {
                    Err(HookError::Timeout { secs: 1 })
                } else {
                    Ok(json!({"type": "ok", "memories": [{"content": "the plugin learned it"}]}))
                }
            })
        }
    }

    struct Setup {
        dir: tempfile::TempDir,
        engine: StackEngine,
        plugin: Arc<Plugin>,
        journal: Arc<SqliteJournal>,
    }

    fn setup(fail: usize, gate: usize, queue_depth: u32, journal: Option<Arc<dyn Journal>>) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let default = DefaultEngine::open(&dir.path().join("memory.db"), DefaultSettings::default()).unwrap();
        let plugin = Arc::new(Plugin { calls: AtomicUsize::new(0), fail, gate: Arc::new(Semaphore::new(gate)) });
        let settings = ExecSettings { after_turn_queue_depth: queue_depth, ..ExecSettings::default() };
        let metrics = Arc::new(Metrics::default());
        let hooks: BTreeSet<HookName> = [HookName::AfterTurn].into_iter().collect();
        let layer = Layer::new("p", plugin.clone(), settings, hooks, Arc::new(Semaphore::new(8)), metrics.clone());
        let layers = vec![StackLayer::new(Arc::new(layer), 1.0)];
        let mut engine = StackEngine::new(default, layers, StackSettings::default(), metrics);
        let policy =
            RetryPolicy { max_attempts: 5, backoff: Duration::from_millis(10), max_backoff: Duration::from_secs(1) };
        let sqlite = Arc::new(SqliteJournal::open(&dir.path().join("state.db"), policy).unwrap());
        engine.attach_journal(journal.unwrap_or_else(|| sqlite.clone()));
        Setup { dir, engine, plugin, journal: sqlite }
    }

    fn turn(text: &str) -> AfterTurnRequest {
        AfterTurnRequest {
            agent_id: "a1".into(),
            messages: vec![Message::text(Role::User, text)],
            ..Default::default()
        }
    }

    async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
        let started = Instant::now();
        while !done() {
            assert!(started.elapsed() < Duration::from_secs(30), "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_turn_is_answered_once_journaled_and_leaves_the_journal_when_the_plugin_answered() {
        let s = setup(0, 0, 16, None);
        s.engine.after_turn(&turn("my cat is Miso")).await.unwrap();
        let pending: Vec<EntryInfo> = s.journal.pending().unwrap();
        assert_eq!(pending.len(), 1, "journaled before the answer");
        assert_eq!(pending[0].owner.as_deref(), Some(Owner::this_process().as_str()), "and held by this process");
        assert_eq!(s.plugin.calls.load(Ordering::SeqCst), 0, "the plugin has not answered yet");
        s.plugin.gate.add_permits(1);
        s.engine.settle().await;
        assert!(s.journal.pending().unwrap().is_empty());
        assert_eq!(s.plugin.calls.load(Ordering::SeqCst), 1);
        let memory = crate::engine::default::memory::MemoryStore::open(&s.dir.path().join("memory.db")).unwrap();
        assert_eq!(memory.count("a1").unwrap(), 2, "the turn and the plugin's memory");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn failed_calls_are_retried_from_the_journal() {
        let s = setup(2, 100, 16, None);
        s.engine.after_turn(&turn("hello")).await.unwrap();
        eventually("the third attempt to succeed", || s.plugin.calls.load(Ordering::SeqCst) == 3).await;
        eventually("the entry to leave", || s.journal.pending().unwrap().is_empty()).await;
        assert_eq!(s.engine.metrics().journal().retries, 2);
        assert!(s.journal.dead().unwrap().is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_full_queue_leaves_the_turn_in_the_journal_for_the_pump() {
        let s = setup(0, 0, 1, None);
        s.engine.after_turn(&turn("one")).await.unwrap();
        s.engine.after_turn(&turn("two")).await.unwrap();
        let pending = s.journal.pending().unwrap();
        assert_eq!(pending.len(), 2);
        assert!(pending[1].owner.is_none(), "the second waits: the plugin's one slot is taken");
        s.plugin.gate.add_permits(2);
        eventually("both turns", || s.plugin.calls.load(Ordering::SeqCst) == 2).await;
        eventually("both entries to leave", || s.journal.pending().unwrap().is_empty()).await;
    }

    /// A journal whose every write fails.
    struct Broken;

    impl Journal for Broken {
        fn location(&self) -> String {
            "broken".into()
        }
        fn append(&self, _: &[NewEntry], _: &Lease) -> Result<Vec<EntryId>, JournalError> {
            Err(JournalError { location: self.location(), op: "append", source: "disk full".into() })
        }
        fn claim(
            &self,
            _: &Lease,
            _: usize,
            _: &[String],
        ) -> Result<crate::host::store::journal::Claims, JournalError> {
            Ok(Default::default())
        }
        fn renew(&self, _: &Lease) -> Result<usize, JournalError> {
            Ok(0)
        }
        fn complete(&self, _: EntryId) -> Result<bool, JournalError> {
            Ok(false)
        }
        fn fail(&self, _: EntryId, _: &Owner, _: &str) -> Result<FailOutcome, JournalError> {
            Ok(FailOutcome::NotHeld)
        }
        fn release(&self, _: &str, _: &str) -> Result<usize, JournalError> {
            Ok(0)
        }
        fn owners(&self) -> Result<Vec<String>, JournalError> {
            Ok(Vec::new())
        }
        fn pending(&self) -> Result<Vec<EntryInfo>, JournalError> {
            Ok(Vec::new())
        }
        fn dead(&self) -> Result<Vec<EntryInfo>, JournalError> {
            Ok(Vec::new())
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_turn_that_cannot_be_journaled_is_an_error_but_still_reaches_the_plugin() {
        let s = setup(0, 1, 16, Some(Arc::new(Broken)));
        let e = s.engine.after_turn(&turn("hello")).await.unwrap_err();
        assert!(matches!(e, crate::engine::EngineError::NotJournaled(_)), "{e}");
        assert!(e.to_string().contains("disk full"), "{e}");
        s.engine.settle().await;
        assert_eq!(s.plugin.calls.load(Ordering::SeqCst), 1, "the call ran in memory");
        assert_eq!(s.engine.metrics().journal().append_failures, 1);
    }
}

/// Not a check: the acknowledgement's cost (`after_turn` until it returns,
/// a no-op plugin, 300 turns) without and with the journal, printed.
/// `MEASURE_DIR` picks the file system (default /tmp).
#[cfg(test)]
mod measure {
    use super::*;
    use crate::engine::ContextEngine;
    use crate::engine::default::DefaultSettings;
    use crate::engine::stack::{StackEngine, StackSettings};
    use crate::host::store::journal::SqliteJournal;
    use crate::manifest::ExecSettings;
    use crate::protocol::{AfterTurnRequest, Message, Role};
    use crate::runner::{BoxFuture, CallOptions, HookError, Runner};
    use serde_json::{Value, json};

    struct Noop;
    impl Runner for Noop {
        fn call<'a>(&'a self, _: &'a HookRequest, _: &'a CallOptions) -> BoxFuture<'a, Result<Value, HookError>> {
            Box::pin(async { Ok(json!({"type": "ok"})) })
        }
    }

    fn pct(mut v: Vec<Duration>) -> (Duration, Duration) {
        v.sort();
        (v[v.len() / 2], v[v.len() * 99 / 100])
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "prints the after_turn ack latency with and without the journal; run with --ignored --nocapture"]
    async fn measure_after_turn_ack() {
        let root = std::env::var("MEASURE_DIR").unwrap_or_else(|_| "/tmp".into());
        for journaled in [false, true] {
            let dir = tempfile::tempdir_in(&root).unwrap();
            let default = DefaultEngine::open(&dir.path().join("memory.db"), DefaultSettings::default()).unwrap();
            let metrics = Arc::new(Metrics::default());
            let hooks = [HookName::AfterTurn].into_iter().collect();
            let layer = Layer::new(
                "p",
                Arc::new(Noop),
                ExecSettings::default(),
                hooks,
                Arc::new(tokio::sync::Semaphore::new(8)),
                metrics.clone(),
            );
            let mut engine = StackEngine::new(
                default,
                vec![StackLayer::new(Arc::new(layer), 1.0)],
                StackSettings::default(),
                metrics,
            );
            if journaled {
                engine.attach_journal(Arc::new(
                    SqliteJournal::open(&dir.path().join("state.db"), RetryPolicy::default()).unwrap(),
                ));
            }
            let mut acks = Vec::new();
            for i in 0..300 {
                let req = AfterTurnRequest {
                    agent_id: "a".into(),
                    messages: vec![Message::text(Role::User, format!("turn {i} about gardens and basil"))],
                    ..Default::default()
                };
                let t = Instant::now();
                engine.after_turn(&req).await.unwrap();
                acks.push(t.elapsed());
                engine.settle().await;
            }
            let (p50, p99) = pct(acks);
            println!("{root} journaled={journaled}: after_turn ack p50 {p50:?} p99 {p99:?}");
        }
    }
}
