//! The plugin engine: a stack of plugin layers over the built-in engine,
//! combined per hook as in spec section 8. A single `plugin` is a stack of one.
//!
//! | hook | behaviour |
//! |---|---|
//! | bootstrap | every layer in order; a failure is logged, the rest still run |
//! | ingest | layers concurrently; memories after the default recall (run once), by weight; the same content (up to whitespace) from several recallers is one memory naming them all ([`super::recall`]) |
//! | assemble, compact | in order; the first non-empty success wins, else the default |
//! | transform_tool_result | in order; the first rewrite wins; errors move on |
//! | after_turn | default store (its failure is the call's error, counted), then every layer in the background (bounded per layer): journaled before the call returns when a journal is attached ([`super::durable`]), else fire-and-forget |
//! | prepare/merge_subagent | in order |
//!
//! A layer's failure follows its `on_hook_failure`: `warn` logs and falls
//! back, `skip` falls back silently, `abort` fails the call.

use std::sync::{Arc, Mutex};

use arc_swap::ArcSwapOption;
use tokio::task::JoinHandle;

use super::default::DefaultEngine;
use super::default::compact::{Compacted, SummaryRequest, summary_message};
use super::durable::{Dispatch, Durable, Pending, call_after_turn};
use super::layer::{BreakerGate, Layer, LayerFailure};
use super::repair::repair_assembled;
use super::{ContextEngine, EngineError, Recalled};
use crate::host::store::journal::{Journal, NewEntry};
use crate::manifest::FailurePolicy;
use crate::metrics::{JournalEvent, Metrics};
use crate::protocol::{
    AfterTurnRequest, AssembleReply, AssembleRequest, Block, BootstrapReply, BootstrapRequest, CompactReply,
    CompactRequest, Content, HookName, HookRequest, IngestReply, IngestRequest, Message, SubagentRequest,
    TransformReply, TransformToolResultRequest,
};
use crate::runner::BoxFuture;

/// Engine-wide settings of the stack.
#[derive(Debug, Clone, PartialEq)]
pub struct StackSettings {
    pub stable_prefix_mode: bool,
    /// `after_turn` text sent to plugins is cut to this many characters (0: no cut).
    pub after_turn_text_limit: usize,
}

impl Default for StackSettings {
    fn default() -> Self {
        StackSettings { stable_prefix_mode: false, after_turn_text_limit: 500 }
    }
}

/// One configured plugin of the stack: its layer and its weight for ordering
/// recalled memories. The layer can be swapped while calls run (hot reload):
/// a call takes the current one at its start and finishes on it. A slot is
/// empty while its plugin does not run (it failed to load, or is disabled);
/// a reload can fill it.
pub struct StackLayer {
    name: String,
    layer: ArcSwapOption<Layer>,
    pub weight: f64,
}

impl StackLayer {
    pub fn new(layer: Arc<Layer>, weight: f64) -> Self {
        StackLayer { name: layer.name().to_owned(), layer: ArcSwapOption::from(Some(layer)), weight }
    }

    /// A slot for plugin `name`, not running yet.
    pub fn empty(name: impl Into<String>, weight: f64) -> Self {
        StackLayer { name: name.into(), layer: ArcSwapOption::empty(), weight }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The layer new calls use now, if the plugin runs.
    pub fn current(&self) -> Option<Arc<Layer>> {
        self.layer.load_full()
    }
}

/// Plugins over the built-in engine.
pub struct StackEngine {
    default: DefaultEngine,
    layers: Arc<[StackLayer]>,
    settings: StackSettings,
    metrics: Arc<Metrics>,
    /// Background `after_turn` calls under way, with their agent.
    pending: Pending,
    /// The journal `after_turn` goes through, when attached, and its pump.
    durable: Option<(Dispatch, JoinHandle<()>)>,
    /// The host-wide bound on hook processes, shared by every layer (and by
    /// the layers a reload builds).
    limiter: Arc<tokio::sync::Semaphore>,
    /// The bootstrap request of the start, replayed to a reloaded layer.
    bootstrapped: Mutex<Option<BootstrapRequest>>,
}

impl StackEngine {
    pub fn new(
        default: DefaultEngine,
        layers: Vec<StackLayer>,
        settings: StackSettings,
        metrics: Arc<Metrics>,
    ) -> Self {
        let limiter = Arc::new(tokio::sync::Semaphore::new(32));
        StackEngine::with_limiter(default, layers, settings, metrics, limiter)
    }

    /// As [`StackEngine::new`], with the bound its layers share.
    pub fn with_limiter(
        default: DefaultEngine,
        layers: Vec<StackLayer>,
        settings: StackSettings,
        metrics: Arc<Metrics>,
        limiter: Arc<tokio::sync::Semaphore>,
    ) -> Self {
        StackEngine {
            default,
            layers: layers.into(),
            settings,
            metrics,
            pending: Pending::default(),
            durable: None,
            limiter,
            bootstrapped: Mutex::new(None),
        }
    }

    /// Sends every `after_turn` through `journal` from now on: a turn is
    /// acknowledged once its plugin calls are journaled, they run from the
    /// journal, and what an earlier process left there (killed, or stopped
    /// with calls waiting) is run now — the replay. Must be called on a
    /// Tokio runtime (the journal's pump is a task on it).
    pub fn attach_journal(&mut self, journal: Arc<dyn Journal>) {
        if let Some((_, old)) = self.durable.take() {
            old.abort();
        }
        let dispatch = Dispatch {
            durable: Arc::new(Durable::new(journal)),
            layers: self.layers.clone(),
            default: self.default.clone(),
            metrics: self.metrics.clone(),
            pending: self.pending.clone(),
        };
        let pump = tokio::spawn(super::durable::pump(dispatch.clone()));
        self.durable = Some((dispatch, pump));
    }

    /// Stops taking journaled `after_turn` calls (those under way go on, and
    /// [`settle`](Self::settle) waits for them); what is left stays in the
    /// journal for the next start. For the end of a daemon or a sidecar.
    pub fn close_journal(&self) {
        if let Some((_, pump)) = &self.durable {
            pump.abort();
        }
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub fn default_engine(&self) -> &DefaultEngine {
        &self.default
    }

    /// The plugins of the stack that run now, in order.
    pub fn layer_names(&self) -> Vec<String> {
        self.layers.iter().filter(|l| l.current().is_some()).map(|l| l.name.clone()).collect()
    }

    /// Every plugin the configuration puts in the stack, running or not.
    pub fn configured_names(&self) -> Vec<String> {
        self.layers.iter().map(|l| l.name.clone()).collect()
    }

    /// The current layer of plugin `name`, when it runs in the stack.
    pub fn layer(&self, name: &str) -> Option<Arc<Layer>> {
        self.layers.iter().find(|l| l.name == name).and_then(StackLayer::current)
    }

    /// The bound on concurrent hook processes the layers share.
    pub fn limiter(&self) -> &Arc<tokio::sync::Semaphore> {
        &self.limiter
    }

    /// Swaps in `plugin` (freshly loaded) for the layer of the same name —
    /// or fills its empty slot: calls under way finish on the old layer, calls
    /// from now on use the new one. The new layer first gets the bootstrap of
    /// the start, so its `env_overrides` apply before it answers anything.
    /// Returns `false` (and changes nothing) when the stack has no such plugin.
    /// The runner is shared with whoever else holds `plugin` (the agent loop).
    pub async fn replace_layer(&self, plugin: &crate::plugin::LoadedPlugin) -> bool {
        let Some(slot) = self.layers.iter().find(|l| l.name == plugin.name) else {
            return false;
        };
        let layer = Arc::new(Layer::new(
            plugin.name.clone(),
            plugin.runner.clone(),
            plugin.settings.clone(),
            plugin.hooks.clone(),
            self.limiter.clone(),
            self.metrics.clone(),
        ));
        let bootstrap = self.bootstrapped.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(request) = bootstrap {
            bootstrap_layer(&layer, &HookRequest::Bootstrap(request)).await;
            layer.runner().prewarm();
        }
        slot.layer.store(Some(layer));
        if let Some((d, _)) = &self.durable {
            // Its journaled calls may be waiting.
            d.durable.wake();
        }
        true
    }

    /// Stops every layer's long-running parts (persistent workers)
    /// gracefully and waits for them; for the end of a daemon or a run.
    pub async fn shutdown(&self) {
        self.close_journal();
        for l in self.layers.iter().filter_map(StackLayer::current) {
            l.runner().shutdown().await;
        }
    }

    /// Stops using plugin `name` (calls under way finish); its slot stays, so
    /// a later reload can fill it again. Returns whether it was running.
    pub fn clear_layer(&self, name: &str) -> bool {
        self.layers.iter().find(|l| l.name == name).is_some_and(|slot| slot.layer.swap(None).is_some())
    }

    /// Waits for every fire-and-forget `after_turn` started so far.
    pub async fn settle(&self) {
        self.settle_where(|_| true).await;
    }

    /// Waits for the fire-and-forget `after_turn` calls of `agent` only, so
    /// one agent's slow plugin never holds up another agent's next turn.
    /// (Each call is awaited by one settler: a concurrent [`settle`](Self::settle)
    /// does not wait for the calls this one took.)
    pub async fn settle_agent(&self, agent: &str) {
        self.settle_where(|a| a == agent).await;
    }

    async fn settle_where(&self, matches: impl Fn(&str) -> bool) {
        loop {
            let handles: Vec<JoinHandle<()>> = {
                let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
                let (mine, rest) = std::mem::take(&mut *pending).into_iter().partition(|(a, _)| matches(a));
                *pending = rest;
                mine.into_iter().map(|(_, h)| h).collect()
            };
            if handles.is_empty() {
                return;
            }
            for h in handles {
                let _ = h.await;
            }
        }
    }

    /// `Err` for `abort`, else logs (`warn`) and lets the caller fall back.
    fn handle(failure: LayerFailure) -> Result<(), EngineError> {
        match failure.policy {
            FailurePolicy::Abort => Err(EngineError::Plugin(failure)),
            FailurePolicy::Warn => {
                tracing::warn!(plugin = %failure.plugin, hook = %failure.hook, "{}; using the fallback", failure.message);
                Ok(())
            }
            FailurePolicy::Skip => Ok(()),
        }
    }
}

/// Bootstraps one layer and applies its `env_overrides`. Bootstrap never
/// stops the start: every failure is only logged.
async fn bootstrap_layer(layer: &Layer, req: &HookRequest) {
    match layer.call(req).await {
        Ok(Some(reply)) => match BootstrapReply::from_value(&reply) {
            Ok(b) if !b.env_overrides.is_empty() => {
                for w in layer.runner().set_env_overrides(b.env_overrides) {
                    tracing::warn!(plugin = %layer.name(), "{w}");
                }
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(plugin = %layer.name(), "bootstrap reply ignored: {e}"),
        },
        Ok(None) => {}
        Err(f) => tracing::warn!(plugin = %f.plugin, "bootstrap failed: {}", f.message),
    }
}

/// `text` cut to `limit` characters (0: whole).
fn cut(text: &str, limit: usize) -> String {
    if limit == 0 { text.to_owned() } else { text.chars().take(limit).collect() }
}

/// The messages of an after_turn as plugins get them: text cut to the limit.
fn cut_messages(messages: &[Message], limit: usize) -> Vec<Message> {
    messages
        .iter()
        .cloned()
        .map(|mut m| {
            match &mut m.content {
                Content::Text(t) => *t = cut(t, limit),
                Content::Blocks(bs) => {
                    for b in bs {
                        if let Block::Text(t) = b {
                            t.text = cut(&t.text, limit);
                        }
                    }
                }
            }
            m
        })
        .collect()
}

impl ContextEngine for StackEngine {
    fn bootstrap<'a>(&'a self, request: &'a BootstrapRequest) -> BoxFuture<'a, Result<(), EngineError>> {
        Box::pin(async move {
            self.default.bootstrap(request).await?;
            *self.bootstrapped.lock().unwrap_or_else(|p| p.into_inner()) = Some(request.clone());
            let req = HookRequest::Bootstrap(request.clone());
            for l in self.layers.iter().filter_map(StackLayer::current) {
                bootstrap_layer(&l, &req).await;
                l.runner().prewarm();
            }
            Ok(())
        })
    }

    fn ingest<'a>(&'a self, request: &'a IngestRequest) -> BoxFuture<'a, Result<Vec<Recalled>, EngineError>> {
        Box::pin(async move {
            let mut recalled = timed_default(HookName::Ingest, self.default.ingest(request)).await?;
            if self.settings.stable_prefix_mode {
                return Ok(super::recall::dedup(recalled));
            }
            let req = HookRequest::Ingest(request.clone());
            let req = &req;
            let calls = self.layers.iter().filter_map(|l| l.current().map(|layer| (l.weight, layer))).map(
                |(weight, layer)| async move {
                    let result = layer.call(req).await;
                    (weight, layer, result)
                },
            );
            let mut results = futures_join_all(calls).await;
            // Highest weight first; the stack order breaks ties.
            results.sort_by(|(a, _, _), (b, _, _)| b.total_cmp(a));
            for (_, layer, result) in results {
                match result {
                    Ok(Some(reply)) => match IngestReply::from_value(&reply) {
                        Ok(r) => {
                            recalled.extend(r.memories.into_iter().map(|m| Recalled::new(m.content, layer.name())))
                        }
                        Err(e) => Self::handle(layer.reject_reply(req, &e.to_string()))?,
                    },
                    Ok(None) => {}
                    Err(f) => Self::handle(f)?,
                }
            }
            // The one place recall is deduplicated (the agent API, the
            // sidecar and `ctxhost run` all come through here).
            Ok(super::recall::dedup(recalled))
        })
    }

    fn assemble<'a>(&'a self, request: &'a AssembleRequest) -> BoxFuture<'a, Result<Vec<Message>, EngineError>> {
        Box::pin(async move {
            let req = HookRequest::Assemble(request.clone());
            for l in self.layers.iter().filter_map(StackLayer::current) {
                match l.call(&req).await {
                    Ok(Some(reply)) => match AssembleReply::from_value(&reply) {
                        Ok(r) if !r.messages.is_empty() => {
                            let (messages, warnings) = repair_assembled(r.messages, &request.messages);
                            for w in warnings {
                                tracing::warn!(plugin = %l.name(), "{w}");
                            }
                            if !messages.is_empty() {
                                return Ok(messages);
                            }
                            // Nothing usable was left: as if the plugin had no opinion.
                        }
                        Ok(_) => {}
                        Err(e) => Self::handle(l.reject_reply(&req, &e.to_string()))?,
                    },
                    Ok(None) => {}
                    Err(f) => Self::handle(f)?,
                }
            }
            timed_default(HookName::Assemble, self.default.assemble(request)).await
        })
    }

    fn compact<'a>(&'a self, request: &'a CompactRequest) -> BoxFuture<'a, Result<Compacted, EngineError>> {
        Box::pin(async move {
            let req = HookRequest::Compact(request.clone());
            for l in self.layers.iter().filter_map(StackLayer::current) {
                match l.call(&req).await {
                    Ok(Some(reply)) => match CompactReply::from_value(&reply) {
                        Ok(CompactReply::Messages { messages, summary }) if !messages.is_empty() => {
                            return Ok(Compacted { messages, summary });
                        }
                        Ok(CompactReply::RequestLlmSummary(d)) if !d.summarize.is_empty() => {
                            let request = SummaryRequest {
                                prompt: d.prompt.as_deref(),
                                messages: &d.summarize,
                                max_tokens: d.max_tokens,
                            };
                            match self.default.summarizer().summarize(request).await {
                                Ok(summary) => {
                                    let summary = summary_message(&summary);
                                    let text = summary.text_content();
                                    let mut messages = vec![summary];
                                    messages.extend(d.keep);
                                    return Ok(Compacted { messages, summary: Some(text) });
                                }
                                // The summarizer is the host's: its failure is not the plugin's.
                                Err(e) => tracing::warn!(
                                    plugin = %l.name(),
                                    "summarizer failed on the plugin's request_llm_summary: {e}; using the default compaction"
                                ),
                            }
                        }
                        Ok(_) => {}
                        Err(e) => Self::handle(l.reject_reply(&req, &e.to_string()))?,
                    },
                    Ok(None) => {}
                    Err(f) => Self::handle(f)?,
                }
            }
            timed_default(HookName::Compact, self.default.compact(request)).await
        })
    }

    fn after_turn<'a>(&'a self, request: &'a AfterTurnRequest) -> BoxFuture<'a, Result<(), EngineError>> {
        Box::pin(async move {
            // Plugins' after_turn failures are only logged (spec section 3),
            // but a turn the built-in memory did not store is the caller's
            // error (counted): the plugins still get the turn, then it fails.
            let stored = self.default.after_turn(request).await.map_err(|e| {
                self.metrics.record_memory_write_failure();
                tracing::error!(agent = %request.agent_id, "the built-in memory could not store the turn: {e}");
                EngineError::NotStored(Box::new(e))
            });
            let mut for_plugins = request.clone();
            for_plugins.messages = cut_messages(&request.messages, self.settings.after_turn_text_limit);
            let req = Arc::new(HookRequest::AfterTurn(for_plugins));
            let layers: Vec<Arc<Layer>> = self
                .layers
                .iter()
                .filter_map(StackLayer::current)
                .filter(|l| l.declares(req.hook()) && l.admits(&req))
                .collect();
            let journaled = match &self.durable {
                Some((d, _)) if !layers.is_empty() => self.journal_turn(d, &req, layers).await,
                _ => {
                    self.fire_and_forget(&req, &request.agent_id, layers);
                    Ok(())
                }
            };
            stored?;
            journaled
        })
    }

    fn transform_tool_result<'a>(
        &'a self,
        request: &'a TransformToolResultRequest,
    ) -> BoxFuture<'a, Result<String, EngineError>> {
        Box::pin(async move {
            let req = HookRequest::TransformToolResult(request.clone());
            for l in self.layers.iter().filter_map(StackLayer::current) {
                match l.call(&req).await {
                    Ok(Some(reply)) => {
                        if let TransformReply::Rewrite(text) = TransformReply::from_value(&reply) {
                            return Ok(text);
                        }
                    }
                    Ok(None) => {}
                    Err(f) => Self::handle(f)?,
                }
            }
            timed_default(HookName::TransformToolResult, self.default.transform_tool_result(request)).await
        })
    }

    fn prepare_subagent<'a>(&'a self, request: &'a SubagentRequest) -> BoxFuture<'a, Result<(), EngineError>> {
        Box::pin(self.subagent(HookRequest::PrepareSubagent(request.clone())))
    }

    fn merge_subagent<'a>(&'a self, request: &'a SubagentRequest) -> BoxFuture<'a, Result<(), EngineError>> {
        Box::pin(self.subagent(HookRequest::MergeSubagent(request.clone())))
    }
}

impl StackEngine {
    /// Journals one entry per plugin taking the turn (durable when this
    /// returns) and starts those with a free after_turn slot; the others
    /// wait in the journal for the pump. When the journal fails, the calls
    /// run fire-and-forget and the turn is not acknowledged.
    async fn journal_turn(
        &self,
        d: &Dispatch,
        req: &Arc<HookRequest>,
        layers: Vec<Arc<Layer>>,
    ) -> Result<(), EngineError> {
        let Some(agent) = req.agent_id().map(str::to_owned) else { return Ok(()) };
        let payload = match serde_json::to_string(&**req) {
            Ok(p) => p,
            Err(e) => {
                // Cannot happen for plain data; the calls still run.
                tracing::error!(%agent, "the after_turn request could not be serialised for the journal: {e}");
                self.fire_and_forget(req, &agent, layers);
                return Ok(());
            }
        };
        // A plugin whose breaker is not closed waits in the journal: the
        // pump runs it when the breaker lets calls through.
        let planned: Vec<(Arc<Layer>, Option<tokio::sync::OwnedSemaphorePermit>)> = layers
            .into_iter()
            .map(|l| {
                let slot =
                    (l.breaker_gate(HookName::AfterTurn) == BreakerGate::Closed).then(|| l.after_turn_slot()).flatten();
                (l, slot)
            })
            .collect();
        let entries = planned
            .iter()
            .map(|(l, slot)| NewEntry {
                hook: HookName::AfterTurn.as_str().to_owned(),
                target: l.name().to_owned(),
                agent: agent.clone(),
                payload: payload.clone(),
                run_now: slot.is_some(),
            })
            .collect();
        match d.durable.append(entries).await {
            Ok(ids) => {
                let mut waiting = false;
                for ((layer, slot), id) in planned.into_iter().zip(ids) {
                    if slot.is_none() {
                        waiting = true;
                        continue;
                    }
                    let entry = crate::host::store::journal::Claimed {
                        id,
                        hook: HookName::AfterTurn.as_str().to_owned(),
                        target: layer.name().to_owned(),
                        agent: agent.clone(),
                        payload: payload.clone(),
                        origin: String::new(),
                        attempt: 1,
                    };
                    d.spawn(layer, slot, entry);
                }
                if waiting {
                    d.durable.wake();
                }
                Ok(())
            }
            Err(e) => {
                self.metrics.record_journal(JournalEvent::AppendFailure);
                tracing::error!(%agent, "{e}; the plugins' after_turn calls run now but would not survive a restart");
                let layers = planned.into_iter().map(|(l, _)| l).collect();
                self.fire_and_forget(req, &agent, layers);
                Err(EngineError::NotJournaled(e))
            }
        }
    }

    /// Starts `after_turn` on `layers` in the background, in memory only
    /// (no journal): a layer whose queue is full does not get the turn.
    fn fire_and_forget(&self, req: &Arc<HookRequest>, agent: &str, layers: Vec<Arc<Layer>>) {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        pending.retain(|(_, h)| !h.is_finished());
        for l in layers {
            let Some(slot) = l.after_turn_slot() else {
                tracing::warn!(plugin = %l.name(), "after_turn queue is full; this turn is not sent to the plugin");
                continue;
            };
            let (req, default, agent) = (req.clone(), self.default.clone(), agent.to_owned());
            pending.push((
                agent.clone(),
                tokio::spawn(async move {
                    let _slot = slot;
                    match call_after_turn(&l, &req, &default, &agent).await {
                        Ok(()) => {}
                        Err(f) if f.policy == FailurePolicy::Skip => {}
                        Err(f) => tracing::warn!(plugin = %f.plugin, "after_turn failed: {}", f.message),
                    }
                }),
            ));
        }
    }
}

impl Drop for StackEngine {
    fn drop(&mut self) {
        self.close_journal();
    }
}

impl StackEngine {
    async fn subagent(&self, req: HookRequest) -> Result<(), EngineError> {
        for l in self.layers.iter().filter_map(StackLayer::current) {
            if let Err(f) = l.call(&req).await {
                Self::handle(f)?;
            }
        }
        Ok(())
    }
}

/// The built-in engine's part in a request, noted in the request's trace
/// (`metrics::traced`) as plugin `default`; not counted in the metrics.
async fn timed_default<T>(
    hook: HookName,
    f: impl std::future::Future<Output = Result<T, EngineError>>,
) -> Result<T, EngineError> {
    let start = std::time::Instant::now();
    let out = f.await;
    let outcome = if out.is_ok() { crate::metrics::CallOutcome::Success } else { crate::metrics::CallOutcome::Failure };
    crate::metrics::note("default", hook, start.elapsed(), outcome);
    out
}

/// Runs futures concurrently on the current task and returns their outputs in order.
async fn futures_join_all<F: std::future::Future>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    let mut set: Vec<std::pin::Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = (0..set.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut done = true;
        for (i, f) in set.iter_mut().enumerate() {
            if out[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => out[i] = Some(v),
                    std::task::Poll::Pending => done = false,
                }
            }
        }
        if done { std::task::Poll::Ready(()) } else { std::task::Poll::Pending }
    })
    .await;
    out.into_iter().flatten().collect()
}
