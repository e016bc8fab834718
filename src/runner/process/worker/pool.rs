//! The workers of one hook script: at most `max_workers`, callers served in
//! arrival order (a fair semaphore), idle workers reused newest first and
//! stopped after `worker_idle_secs`, a fault answered by one respawn and one
//! retry, and a crash loop answered by failing fast.
//!
//! Never decides how a worker is started (the caller hands a `Start` maker)
//! nor reads a worker's output (`process.rs`).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::Semaphore;

use super::process::{Answer, Fault, RpcCall, Start, Worker};
use crate::metrics::WorkerEvent;
use crate::protocol::HookName;
use crate::runner::HookError;

/// Worker faults in a row (no success between, each within
/// [`LOOP_WINDOW`] of the previous) that make the pool stop respawning.
pub const LOOP_LIMIT: u32 = 4;
/// Faults further apart than this do not form a loop.
const LOOP_WINDOW: Duration = Duration::from_secs(60);
/// How long calls fail fast once the limit is reached; then one call may
/// try again (a fresh failure closes the pool again at once).
pub const LOOP_COOLDOWN: Duration = Duration::from_secs(10);

/// Consecutive worker faults of one pool.
#[derive(Debug, Default)]
struct CrashGuard {
    consecutive: u32,
    last: Option<Instant>,
    last_error: String,
}

impl CrashGuard {
    fn tripped(&self) -> bool {
        self.consecutive >= LOOP_LIMIT && self.last.is_some_and(|at| at.elapsed() < LOOP_COOLDOWN)
    }
}

/// One call's way to start a worker for this script (the runner builds the
/// command, environment and TMPDIR).
pub(super) type Starter<'s, 'a> = &'s (dyn Fn() -> Result<Start<'a>, HookError> + Sync);

/// The workers of one script.
pub(super) struct Pool {
    plugin: String,
    script: PathBuf,
    max_workers: usize,
    idle_after: Option<Duration>,
    slots: Semaphore,
    idle: Mutex<Vec<Worker>>,
    /// Pids of the workers alive (idle or busy).
    live: Arc<Mutex<BTreeSet<u32>>>,
    guard: Mutex<CrashGuard>,
    reaper: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Where respawns and retries are counted (the engine's, once attached).
    metrics: super::MetricsSlot,
}

/// Removes a worker's pid from the live set when its call path lets go of it.
struct Live<'a> {
    worker: Option<Worker>,
    live: &'a Mutex<BTreeSet<u32>>,
}

impl Drop for Live<'_> {
    fn drop(&mut self) {
        if let Some(w) = self.worker.take() {
            lock(self.live).remove(&w.pid());
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Pool {
    pub(super) fn new(
        plugin: &str,
        script: PathBuf,
        max_workers: u32,
        idle_secs: u64,
        metrics: super::MetricsSlot,
    ) -> Arc<Pool> {
        let max_workers = max_workers.max(1) as usize;
        Arc::new(Pool {
            plugin: plugin.to_owned(),
            script,
            max_workers,
            idle_after: (idle_secs > 0).then(|| Duration::from_secs(idle_secs)),
            slots: Semaphore::new(max_workers),
            idle: Mutex::new(Vec::new()),
            live: Arc::new(Mutex::new(BTreeSet::new())),
            guard: Mutex::new(CrashGuard::default()),
            reaper: Mutex::new(None),
            metrics,
        })
    }

    fn count(&self, hook: HookName, event: WorkerEvent) {
        let metrics = self.metrics.read().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(m) = metrics {
            m.record_worker(&self.plugin, hook, event);
        }
    }

    pub(super) fn pids(&self) -> Vec<u32> {
        lock(&self.live).iter().copied().collect()
    }

    /// Starts idle workers up to `max_workers` (prewarm). Failures are logged.
    pub(super) fn fill(self: &Arc<Self>, start: Starter<'_, '_>) {
        if lock(&self.guard).tripped() {
            return;
        }
        let missing = self.max_workers.saturating_sub(lock(&self.live).len());
        for _ in 0..missing {
            match start().and_then(Worker::start) {
                Ok(worker) => {
                    lock(&self.live).insert(worker.pid());
                    lock(&self.idle).push(worker);
                }
                Err(e) => {
                    tracing::warn!(plugin = %self.plugin, "prewarming a worker for `{}` failed: {e}", self.script.display());
                    return;
                }
            }
        }
        self.ensure_reaper();
    }

    /// One call: a worker (idle, or started), the exchange, and on a fault
    /// one respawn and one retry (for hooks safe to repeat, see
    /// `HookName::retry_safe`). `rpc`: the call goes out as JSON-RPC.
    /// A JSON-RPC `error` answer fails the call but is no fault: the worker
    /// answered, and stays.
    pub(super) async fn call(
        self: &Arc<Self>,
        start: Starter<'_, '_>,
        generation: u64,
        hook: HookName,
        request: &[u8],
        rpc: Option<&RpcCall<'_>>,
        timeout: Duration,
    ) -> Result<Value, HookError> {
        self.fail_fast()?;
        // Fair: callers get a slot in the order they asked.
        let _slot =
            self.slots.acquire().await.map_err(|_| HookError::Io(std::io::Error::other("worker pool closed")))?;
        let mut held = Live { worker: None, live: &self.live };
        let fault = match self.checkout(start, generation, &mut held, rpc.is_some()) {
            Ok(()) => match self.exchange(&mut held, request, rpc, timeout).await {
                Ok(answer) => return self.answered(held, answer, hook),
                Err(fault) => fault,
            },
            Err(CheckoutError::Fault(fault)) => fault,
            Err(CheckoutError::Start(e)) => return Err(self.failure(e)),
        };
        let error = self.discard(&mut held, fault).await;
        self.count(hook, WorkerEvent::Respawn);
        let error = self.failure(error);
        if !hook.retry_safe() {
            // It may have acted already (a tool ran, a plugin started): not
            // done twice. The next call gets a fresh worker.
            return Err(error);
        }
        self.fail_fast()?;
        self.count(hook, WorkerEvent::Retry);
        tracing::debug!(plugin = %self.plugin, %hook, "worker failed ({error}); retrying on a fresh one");
        if let Err(e) = self.start_into(start, &mut held) {
            return Err(self.failure(e));
        }
        match self.exchange(&mut held, request, rpc, timeout).await {
            Ok(answer) => self.answered(held, answer, hook),
            Err(fault) => {
                let error = self.discard(&mut held, fault).await;
                self.count(hook, WorkerEvent::Respawn);
                Err(self.failure(error))
            }
        }
    }

    async fn exchange(
        &self,
        held: &mut Live<'_>,
        request: &[u8],
        rpc: Option<&RpcCall<'_>>,
        timeout: Duration,
    ) -> Result<Answer, Fault> {
        match held.worker.as_mut() {
            Some(worker) => worker.exchange(request, rpc, timeout).await,
            None => Err(Fault::Ended),
        }
    }

    /// The worker answered: it goes back to the idle set, and the call gets
    /// the reply, or fails with the worker's JSON-RPC error.
    fn answered(self: &Arc<Self>, held: Live<'_>, answer: Answer, hook: HookName) -> Result<Value, HookError> {
        match answer {
            Answer::Reply(value) => Ok(self.success(held, value)),
            Answer::Refused(error) => {
                self.success(held, Value::Null);
                Err(HookError::Failed(format!(
                    "plugin '{}' answered `{}` with error {}: {}",
                    self.plugin,
                    hook.rpc_method(),
                    error.code,
                    error.message
                )))
            }
        }
    }

    /// Puts an idle worker (or a new one) in `held`. Idle workers that
    /// cannot serve (another runtime, an old environment, exited since
    /// their last call) are stopped on the way, without counting as faults;
    /// one with stray output is a fault (`line` protocol; with `keep_lines`
    /// the exchange reads what waits).
    fn checkout(
        &self,
        start: Starter<'_, '_>,
        generation: u64,
        held: &mut Live<'_>,
        keep_lines: bool,
    ) -> Result<(), CheckoutError> {
        loop {
            let Some(mut worker) = lock(&self.idle).pop() else { break };
            let pid = worker.pid();
            let reason = if !worker.in_current_runtime() {
                "it belongs to another runtime"
            } else if worker.generation != generation {
                "the environment changed (bootstrap env_overrides)"
            } else {
                match worker.check_quiet(keep_lines) {
                    Ok(()) => {
                        held.worker = Some(worker);
                        return Ok(());
                    }
                    Err(Fault::Ended) => "it exited after its last reply",
                    Err(fault) => {
                        held.worker = Some(worker);
                        return Err(CheckoutError::Fault(fault));
                    }
                }
            };
            tracing::debug!(plugin = %self.plugin, pid, "replacing an idle worker: {reason}");
            lock(&self.live).remove(&pid);
            stop_later(worker);
        }
        self.start_into(start, held).map_err(CheckoutError::Start)
    }

    fn start_into(&self, start: Starter<'_, '_>, held: &mut Live<'_>) -> Result<(), HookError> {
        let worker = start().and_then(Worker::start)?;
        lock(&self.live).insert(worker.pid());
        held.worker = Some(worker);
        Ok(())
    }

    /// Kills the worker in `held` after a fault; the call's error.
    async fn discard(&self, held: &mut Live<'_>, fault: Fault) -> HookError {
        let Some(worker) = held.worker.take() else { return HookError::Io(std::io::Error::other("no worker")) };
        lock(&self.live).remove(&worker.pid());
        if let Fault::Stray(what) = &fault {
            tracing::warn!(
                plugin = %self.plugin,
                pid = worker.pid(),
                "the worker for `{}` broke the protocol ({what}); it is killed and replaced",
                self.script.display()
            );
        }
        worker.fail(fault).await
    }

    fn success(self: &Arc<Self>, mut held: Live<'_>, value: Value) -> Value {
        *lock(&self.guard) = CrashGuard::default();
        if let Some(mut worker) = held.worker.take() {
            if worker.ended() || worker.retired() {
                // It answered and exited (a one-shot script), or left some
                // of our lines unread: nothing to keep.
                lock(&self.live).remove(&worker.pid());
                stop_later(worker);
            } else {
                worker.idle_since = Instant::now();
                lock(&self.idle).push(worker);
                self.ensure_reaper();
            }
        }
        value
    }

    /// Counts a fault (or a failed start) towards the crash loop.
    fn failure(&self, error: HookError) -> HookError {
        let mut guard = lock(&self.guard);
        if guard.last.is_some_and(|at| at.elapsed() > LOOP_WINDOW) {
            guard.consecutive = 0;
        }
        guard.consecutive += 1;
        guard.last = Some(Instant::now());
        guard.last_error = error.to_string();
        if guard.consecutive == LOOP_LIMIT {
            tracing::warn!(
                plugin = %self.plugin,
                "the worker for `{}` failed {LOOP_LIMIT} times in a row; not restarting it for {}s: {error}",
                self.script.display(),
                LOOP_COOLDOWN.as_secs()
            );
        }
        error
    }

    /// While in a crash loop: the error calls get instead of a new worker.
    fn fail_fast(&self) -> Result<(), HookError> {
        let guard = lock(&self.guard);
        if !guard.tripped() {
            return Ok(());
        }
        Err(HookError::CrashLoop(format!(
            "`{}` of plugin '{}' keeps failing ({} times in a row, last: {}); \
             not restarted for {}s after the last failure",
            self.script.display(),
            self.plugin,
            guard.consecutive,
            guard.last_error,
            LOOP_COOLDOWN.as_secs()
        )))
    }

    /// Starts the idle reaper unless it runs (on this runtime).
    fn ensure_reaper(self: &Arc<Self>) {
        let Some(idle_after) = self.idle_after else { return };
        let mut reaper = lock(&self.reaper);
        if reaper.as_ref().is_some_and(|h| !h.is_finished()) {
            return;
        }
        let tick = (idle_after / 4).clamp(Duration::from_millis(50), Duration::from_secs(5));
        let pool = Arc::downgrade(self);
        *reaper = Some(tokio::spawn(reap(pool, idle_after, tick)));
    }

    /// Takes the workers idle for longer than `idle_after`.
    fn take_expired(&self, idle_after: Duration) -> Vec<Worker> {
        let mut idle = lock(&self.idle);
        let (expired, kept): (Vec<Worker>, Vec<Worker>) =
            idle.drain(..).partition(|w| w.idle_since.elapsed() >= idle_after);
        *idle = kept;
        let mut live = lock(&self.live);
        for w in &expired {
            live.remove(&w.pid());
        }
        expired
    }
}

enum CheckoutError {
    Fault(Fault),
    Start(HookError),
}

/// Stops idle workers once they have been idle for `idle_after`; ends with the pool.
async fn reap(pool: Weak<Pool>, idle_after: Duration, tick: Duration) {
    loop {
        tokio::time::sleep(tick).await;
        let Some(strong) = pool.upgrade() else { return };
        let expired = strong.take_expired(idle_after);
        let script = strong.script.display().to_string();
        drop(strong);
        for worker in expired {
            tracing::debug!(pid = worker.pid(), "stopping the idle worker of `{script}`");
            worker.stop().await;
        }
    }
}

impl Pool {
    /// Stops the idle workers gracefully, waiting for each.
    pub(super) async fn shutdown(&self) {
        let workers: Vec<Worker> = lock(&self.idle).drain(..).collect();
        for worker in workers {
            lock(&self.live).remove(&worker.pid());
            worker.stop().await;
        }
    }
}

/// Stops a worker gracefully in the background when a runtime is at hand;
/// otherwise dropping it kills its group at once.
fn stop_later(worker: Worker) {
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        drop(handle.spawn(worker.stop()));
    }
}

impl Drop for Pool {
    /// The runner is gone (reload, shutdown): idle workers stop gracefully.
    fn drop(&mut self) {
        if let Some(reaper) = lock(&self.reaper).take() {
            reaper.abort();
        }
        let workers: Vec<Worker> = lock(&self.idle).drain(..).collect();
        lock(&self.live).clear();
        for worker in workers {
            stop_later(worker);
        }
    }
}
