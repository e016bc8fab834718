//! One plugin inside the engine, with the policies of spec sections 2-3:
//! filters, caches, retries with backoff, a circuit breaker and the host-wide
//! bound on concurrent hook processes. A layer answers with the plugin's raw
//! reply, "not applicable", or a failure that carries the plugin's
//! `on_hook_failure` policy; what to fall back to is the engine's business.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use crate::manifest::{ExecSettings, FailurePolicy};
use crate::metrics::{CallOutcome, Metrics};
use crate::protocol::{HookName, HookRequest};
use crate::runner::{CallOptions, ErrorKind, Runner};

/// Retries never wait longer than this.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(30);

/// Why a layer produced no reply.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct LayerFailure {
    pub plugin: String,
    pub hook: HookName,
    pub policy: FailurePolicy,
    /// The last call's kind; `Unavailable` while the breaker is open,
    /// `BadReply` for a reply the engine could not use.
    pub kind: ErrorKind,
    pub message: String,
}

/// A cached reply's key: the hook and the SHA-256 of the request line.
type CacheKey = (HookName, [u8; 32]);

/// One plugin with its policies.
pub struct Layer {
    name: String,
    runner: Arc<dyn Runner>,
    settings: ExecSettings,
    hooks: BTreeSet<HookName>,
    /// One breaker per hook: background after_turn failures must not
    /// bench the plugin's ingest.
    breakers: Mutex<HashMap<HookName, Breaker>>,
    cache: Mutex<HashMap<CacheKey, (Instant, Value)>>,
    limiter: Arc<Semaphore>,
    after_turn_slots: Arc<Semaphore>,
    metrics: Arc<Metrics>,
}

#[derive(Debug, Default)]
struct Breaker {
    consecutive_failures: u32,
    open_until: Option<Instant>,
    /// Half-open: one trial call is under way; others still fail fast.
    trial: bool,
}

/// What a hook's circuit breaker lets through ([`Layer::breaker_gate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerGate {
    /// Every call.
    Closed,
    /// One call, the trial that closes or reopens it.
    HalfOpen,
    /// None: until `until`, or (`None`) until the trial under way ends.
    Open { until: Option<Instant> },
}

/// Cached replies kept per layer at most; the oldest go first.
const CACHE_CAPACITY: usize = 256;

impl Layer {
    /// A layer for plugin `name`. `limiter` is the host-wide bound on hook
    /// processes, shared by all layers.
    pub fn new(
        name: impl Into<String>,
        runner: Arc<dyn Runner>,
        settings: ExecSettings,
        hooks: BTreeSet<HookName>,
        limiter: Arc<Semaphore>,
        metrics: Arc<Metrics>,
    ) -> Self {
        let after_turn_slots = Arc::new(Semaphore::new(settings.after_turn_queue_depth.max(1) as usize));
        runner.attach_metrics(metrics.clone());
        Layer {
            name: name.into(),
            runner,
            settings,
            hooks,
            breakers: Mutex::new(HashMap::new()),
            cache: Mutex::new(HashMap::new()),
            limiter,
            after_turn_slots,
            metrics,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn declares(&self, hook: HookName) -> bool {
        self.hooks.contains(&hook)
    }

    pub fn runner(&self) -> &Arc<dyn Runner> {
        &self.runner
    }

    /// A slot for one fire-and-forget `after_turn`, or `None` when
    /// `after_turn_queue_depth` calls are already under way.
    pub fn after_turn_slot(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.after_turn_slots.clone().try_acquire_owned().ok()
    }

    /// How many `after_turn` slots are free now.
    pub fn after_turn_slots_free(&self) -> usize {
        self.after_turn_slots.available_permits()
    }

    /// A slot for one background `after_turn`, once one is free.
    pub async fn after_turn_slot_wait(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.after_turn_slots.clone().acquire_owned().await.ok()
    }

    /// Whether the filters let `request` through: `only_for_agent_ids` (the
    /// agent id contains one of them) for every hook with an agent, and
    /// `ingest_filter` / `ingest_regex` for ingest.
    pub fn admits(&self, request: &HookRequest) -> bool {
        let s = &self.settings;
        if !s.only_for_agent_ids.is_empty()
            && let Some(agent) = request.agent_id()
            && !s.only_for_agent_ids.iter().any(|id| agent.contains(id.as_str()))
        {
            return false;
        }
        if let HookRequest::Ingest(r) = request {
            if s.ingest_filter.as_deref().is_some_and(|f| !r.message.contains(f)) {
                return false;
            }
            if s.ingest_regex.as_ref().is_some_and(|re| !re.is_match(&r.message)) {
                return false;
            }
        }
        true
    }

    fn cache_ttl(&self, hook: HookName) -> Duration {
        let s = &self.settings;
        Duration::from_secs(match hook {
            HookName::Assemble => s.assemble_cache_ttl_secs,
            HookName::Compact => s.compact_cache_ttl_secs,
            HookName::Ingest | HookName::TransformToolResult => s.hook_cache_ttl_secs,
            // Hooks with effects are never answered from a cache.
            _ => 0,
        })
    }

    /// Runs `request` through the policies. `Ok(None)`: the plugin does not
    /// take part (hook not declared, or filtered out).
    ///
    /// # Errors
    /// A [`LayerFailure`] after the retries, or at once while the breaker is open.
    pub async fn call(&self, request: &HookRequest) -> Result<Option<Value>, LayerFailure> {
        let hook = request.hook();
        if !self.declares(hook) || !self.admits(request) {
            return Ok(None);
        }
        let ttl = self.cache_ttl(hook);
        let key = (!ttl.is_zero()).then(|| (hook, <[u8; 32]>::from(Sha256::digest(request.to_json_line()))));
        if let Some(key) = &key
            && let Some(hit) = self.cached(key, ttl)
        {
            return Ok(Some(hit));
        }
        self.breaker_admits(hook)?;

        // Latency counts the plugin's own time (calls and backoff), not the
        // wait for a slot under max_concurrent_hooks.
        let mut elapsed = Duration::ZERO;
        let mut attempt = 0;
        let result = loop {
            let outcome = {
                let _permit = self.limiter.acquire().await;
                let started = Instant::now();
                let outcome = self.runner.call(request, &CallOptions::default()).await;
                elapsed += started.elapsed();
                outcome
            };
            match outcome {
                Ok(reply) => break Ok(reply),
                Err(e) if attempt < self.settings.max_retries => {
                    attempt += 1;
                    tracing::debug!(plugin = %self.name, %hook, "attempt {attempt} failed: {e}; retrying");
                    let delay = retry_delay(self.settings.retry_delay_ms, attempt);
                    tokio::time::sleep(delay).await;
                    elapsed += delay;
                }
                Err(e) if attempt > 0 => {
                    break Err((e.kind(), format!("Hook script failed after {attempt} retries: {e}")));
                }
                Err(e) => break Err((e.kind(), e.to_string())),
            }
        };
        match result {
            Ok(reply) => {
                self.breaker_success(hook);
                self.metrics.record(&self.name, hook, elapsed, CallOutcome::Success);
                if let Some(key) = key {
                    self.remember(key, reply.clone());
                }
                Ok(Some(reply))
            }
            Err((kind, message)) => {
                self.breaker_failure(hook);
                let outcome = match self.settings.on_hook_failure {
                    FailurePolicy::Abort => CallOutcome::Failure,
                    _ => CallOutcome::Fallback,
                };
                self.metrics.record(&self.name, hook, elapsed, outcome);
                Err(self.failure(hook, kind, message))
            }
        }
    }

    /// Records that the reply to `request` was unusable (the engine checked
    /// it): it leaves the cache, and counts against the breaker like a failure.
    pub fn reject_reply(&self, request: &HookRequest, reason: &str) -> LayerFailure {
        let hook = request.hook();
        let key = (hook, <[u8; 32]>::from(Sha256::digest(request.to_json_line())));
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
        self.breaker_failure(hook);
        self.failure(hook, ErrorKind::BadReply, format!("unusable reply: {reason}"))
    }

    /// Caches a reply, dropping expired entries and, past the capacity, the oldest.
    fn remember(&self, key: CacheKey, reply: Value) {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        cache.retain(|(hook, _), (at, _)| now.duration_since(*at) < self.cache_ttl(*hook));
        while cache.len() >= CACHE_CAPACITY {
            let Some(oldest) = cache.iter().min_by_key(|(_, (at, _))| *at).map(|(k, _)| *k) else { break };
            cache.remove(&oldest);
        }
        cache.insert(key, (now, reply));
    }

    fn failure(&self, hook: HookName, kind: ErrorKind, message: String) -> LayerFailure {
        LayerFailure { plugin: self.name.clone(), hook, policy: self.settings.on_hook_failure, kind, message }
    }

    fn cached(&self, key: &CacheKey, ttl: Duration) -> Option<Value> {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        match cache.get(key) {
            Some((at, value)) if at.elapsed() < ttl => Some(value.clone()),
            Some(_) => {
                cache.remove(key);
                None
            }
            None => None,
        }
    }

    fn breaker_admits(&self, hook: HookName) -> Result<(), LayerFailure> {
        let mut breakers = self.breakers.lock().unwrap_or_else(|p| p.into_inner());
        let b = breakers.entry(hook).or_default();
        let open = match b.open_until {
            Some(until) if Instant::now() < until => true,
            // Half-open: one call goes through as the trial (one more failure
            // opens the breaker again at once); the others keep failing fast.
            Some(_) if b.trial => true,
            Some(_) => {
                b.trial = true;
                false
            }
            None => false,
        };
        drop(breakers);
        if open {
            self.metrics.record(&self.name, hook, Duration::ZERO, CallOutcome::Fallback);
            let message = format!("circuit-open: '{hook}' suspended after repeated failures");
            return Err(self.failure(hook, ErrorKind::Unavailable, message));
        }
        Ok(())
    }

    /// What the breaker of `hook` lets through now, for work that can wait
    /// (journaled `after_turn`) rather than fail fast while it is open.
    pub fn breaker_gate(&self, hook: HookName) -> BreakerGate {
        let breakers = self.breakers.lock().unwrap_or_else(|p| p.into_inner());
        match breakers.get(&hook) {
            None | Some(Breaker { open_until: None, .. }) => BreakerGate::Closed,
            Some(Breaker { trial: true, .. }) => BreakerGate::Open { until: None },
            Some(Breaker { open_until: Some(until), .. }) if Instant::now() < *until => {
                BreakerGate::Open { until: Some(*until) }
            }
            Some(_) => BreakerGate::HalfOpen,
        }
    }

    fn breaker_success(&self, hook: HookName) {
        let mut breakers = self.breakers.lock().unwrap_or_else(|p| p.into_inner());
        breakers.insert(hook, Breaker::default());
    }

    fn breaker_failure(&self, hook: HookName) {
        let cb = self.settings.circuit_breaker;
        let mut breakers = self.breakers.lock().unwrap_or_else(|p| p.into_inner());
        let b = breakers.entry(hook).or_default();
        if b.trial {
            // The half-open trial failed: open again at once.
            b.trial = false;
            b.open_until = None;
            b.consecutive_failures = cb.max_failures.saturating_sub(1);
        }
        b.consecutive_failures += 1;
        if cb.max_failures > 0 && b.consecutive_failures >= cb.max_failures && b.open_until.is_none() {
            b.open_until = Some(Instant::now() + Duration::from_secs(cb.reset_secs));
            tracing::warn!(
                plugin = %self.name, %hook,
                "circuit breaker open after {} consecutive failures; the plugin is skipped for {}s",
                b.consecutive_failures, cb.reset_secs
            );
        }
    }
}

/// Retry `n` (from 1) waits `base * 2^n`, capped at 30 s (LibreFang's schedule).
pub fn retry_delay(base_ms: u64, n: u32) -> Duration {
    let ms = base_ms.saturating_mul(1u64.checked_shl(n).unwrap_or(u64::MAX));
    Duration::from_millis(ms).min(MAX_RETRY_DELAY)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::{BoxFuture, HookError};
    use serde_json::json;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A runner that fails the first `fail` calls, then answers `{"n": call}`.
    struct Scripted {
        calls: AtomicUsize,
        fail: usize,
    }

    impl Runner for Scripted {
        fn call<'a>(&'a self, _: &'a HookRequest, _: &'a CallOptions) -> BoxFuture<'a, Result<Value, HookError>> {
            Box::pin(async move {
                let n = self.calls.fetch_add(1, Ordering::SeqCst);
                if n < self.fail { Err(HookError::Timeout { secs: 1 }) } else { Ok(json!({"n": n})) }
            })
        }
    }

    fn layer(fail: usize, tweak: impl FnOnce(&mut ExecSettings)) -> (Layer, Arc<Scripted>) {
        let runner = Arc::new(Scripted { calls: AtomicUsize::new(0), fail });
        let mut settings = ExecSettings { retry_delay_ms: 1, ..ExecSettings::default() };
        tweak(&mut settings);
        let hooks = HookName::ALL.into_iter().collect();
        let l = Layer::new("p", runner.clone(), settings, hooks, Arc::new(Semaphore::new(4)), Arc::default());
        (l, runner)
    }

    fn ingest(agent: &str, message: &str) -> HookRequest {
        HookRequest::from_json(HookName::Ingest, json!({"agent_id": agent, "message": message})).unwrap()
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    #[test]
    fn retries_with_backoff_then_succeeds() {
        let (l, runner) = layer(2, |s| s.max_retries = 2);
        assert_eq!(rt().block_on(l.call(&ingest("a", "m"))).unwrap(), Some(json!({"n": 2})));
        assert_eq!(runner.calls.load(Ordering::SeqCst), 3);
        assert_eq!((retry_delay(500, 1), retry_delay(500, 2)), (Duration::from_secs(1), Duration::from_secs(2)));
        assert_eq!(retry_delay(500, 20), MAX_RETRY_DELAY);
    }

    #[test]
    fn failure_after_retries_carries_the_policy() {
        let (l, _) = layer(10, |s| {
            s.max_retries = 1;
            s.on_hook_failure = FailurePolicy::Abort;
        });
        let err = rt().block_on(l.call(&ingest("a", "m"))).unwrap_err();
        assert_eq!(err.policy, FailurePolicy::Abort);
        assert_eq!(err.message, "Hook script failed after 1 retries: Hook timed out after 1s");
        assert_eq!(err.kind, ErrorKind::Timeout, "the last attempt's kind");
    }

    #[test]
    fn the_breaker_opens_then_lets_one_trial_through_after_reset() {
        let (l, runner) =
            layer(3, |s| s.circuit_breaker = crate::manifest::CircuitBreaker { max_failures: 2, reset_secs: 0 });
        let rt = rt();
        let req = ingest("a", "m");
        assert!(rt.block_on(l.call(&req)).is_err());
        assert!(rt.block_on(l.call(&req)).is_err());
        // Open for 0 s: the next call is the half-open trial (runner call 3 fails)...
        assert!(rt.block_on(l.call(&req)).is_err());
        assert_eq!(runner.calls.load(Ordering::SeqCst), 3);
        // ...and the one after succeeds and closes it.
        assert_eq!(rt.block_on(l.call(&req)).unwrap(), Some(json!({"n": 3})));
    }

    #[test]
    fn each_hook_has_its_own_breaker() {
        let (l, _) =
            layer(2, |s| s.circuit_breaker = crate::manifest::CircuitBreaker { max_failures: 2, reset_secs: 60 });
        let rt = rt();
        let after_turn = HookRequest::from_json(HookName::AfterTurn, json!({"agent_id": "a"})).unwrap();
        assert!(rt.block_on(l.call(&after_turn)).is_err());
        assert!(rt.block_on(l.call(&after_turn)).is_err());
        assert!(rt.block_on(l.call(&after_turn)).unwrap_err().message.starts_with("circuit-open"));
        assert_eq!(rt.block_on(l.call(&ingest("a", "m"))).unwrap(), Some(json!({"n": 2})), "ingest is not benched");
    }

    #[test]
    fn an_open_breaker_fails_fast_without_calling() {
        let (l, runner) =
            layer(100, |s| s.circuit_breaker = crate::manifest::CircuitBreaker { max_failures: 2, reset_secs: 60 });
        let rt = rt();
        let req = ingest("a", "m");
        for _ in 0..2 {
            assert!(rt.block_on(l.call(&req)).is_err());
        }
        let err = rt.block_on(l.call(&req)).unwrap_err();
        assert_eq!(err.message, "circuit-open: 'ingest' suspended after repeated failures");
        assert_eq!(err.kind, ErrorKind::Unavailable);
        assert_eq!(runner.calls.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn filters_keep_the_plugin_out() {
        let (l, runner) = layer(0, |s| {
            s.only_for_agent_ids = vec!["team-".into()];
            s.ingest_filter = Some("remember".into());
            s.ingest_regex = Some(regex::Regex::new("^please").unwrap());
        });
        let rt = rt();
        assert_eq!(rt.block_on(l.call(&ingest("solo", "please remember"))).unwrap(), None);
        assert_eq!(rt.block_on(l.call(&ingest("team-1", "please note"))).unwrap(), None);
        assert_eq!(rt.block_on(l.call(&ingest("team-1", "remember please"))).unwrap(), None);
        assert!(rt.block_on(l.call(&ingest("team-1", "please remember"))).unwrap().is_some());
        assert_eq!(runner.calls.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn the_cache_answers_identical_requests_within_the_ttl() {
        let (l, runner) = layer(0, |s| s.hook_cache_ttl_secs = 60);
        let rt = rt();
        let first = rt.block_on(l.call(&ingest("a", "m"))).unwrap();
        assert_eq!(rt.block_on(l.call(&ingest("a", "m"))).unwrap(), first);
        assert_eq!(runner.calls.load(Ordering::SeqCst), 1);
        rt.block_on(l.call(&ingest("a", "other"))).unwrap();
        assert_eq!(runner.calls.load(Ordering::SeqCst), 2);
        let after_turn = HookRequest::from_json(HookName::AfterTurn, json!({"agent_id": "a"})).unwrap();
        rt.block_on(l.call(&after_turn)).unwrap();
        rt.block_on(l.call(&after_turn)).unwrap();
        assert_eq!(runner.calls.load(Ordering::SeqCst), 4, "after_turn is never cached");
    }
}
