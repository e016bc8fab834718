//! The four methods LibreFang's sidecar client sends, each read from its
//! exact params, run on the engine, and answered in LibreFang's shapes.
//!
//! Owns the mapping between LibreFang's params and ctxhost's typed requests,
//! and the per-agent ordering of `after_turn` before the next `ingest`. It
//! never touches stdin or stdout.

use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::turns::{TurnGuard, Turns};
use super::{ids, librefang};
use crate::engine::ContextEngine;
use crate::engine::stack::StackEngine;
use crate::protocol::{AfterTurnRequest, AssembleRequest, BootstrapRequest, IngestRequest, Message};

/// The methods LibreFang sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Bootstrap,
    Ingest,
    Assemble,
    AfterTurn,
}

impl Method {
    pub fn parse(name: &str) -> Option<Method> {
        Some(match name {
            "bootstrap" => Method::Bootstrap,
            "ingest" => Method::Ingest,
            "assemble" => Method::Assemble,
            "after_turn" => Method::AfterTurn,
            _ => return None,
        })
    }

    /// The context hook the method calls.
    pub fn hook(self) -> crate::protocol::HookName {
        use crate::protocol::HookName;
        match self {
            Method::Bootstrap => HookName::Bootstrap,
            Method::Ingest => HookName::Ingest,
            Method::Assemble => HookName::Assemble,
            Method::AfterTurn => HookName::AfterTurn,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Method::Bootstrap => "bootstrap",
            Method::Ingest => "ingest",
            Method::Assemble => "assemble",
            Method::AfterTurn => "after_turn",
        }
    }
}

/// Timing knobs of the sidecar.
#[derive(Debug, Clone, PartialEq)]
pub struct SidecarOptions {
    /// How long an `ingest` waits for the same agent's earlier `after_turn`
    /// plugin calls, so what a turn taught is recalled on the next one.
    pub ingest_wait: Duration,
    /// How long, after stdin closes, pending `after_turn` work may run.
    pub settle_timeout: Duration,
}

impl Default for SidecarOptions {
    fn default() -> Self {
        SidecarOptions { ingest_wait: Duration::from_secs(5), settle_timeout: Duration::from_secs(10) }
    }
}

/// What every request task shares.
pub struct Methods {
    pub engine: Arc<StackEngine>,
    pub options: SidecarOptions,
    pub turns: Arc<Turns>,
    /// `after_turn` settles still running.
    settles: Mutex<Vec<JoinHandle<()>>>,
    /// The last tool list seen and its token count (it rarely changes).
    tools_tokens: Mutex<Option<(u64, usize)>>,
}

#[derive(Deserialize)]
struct BootstrapParams {
    #[serde(default)]
    context_window_tokens: u64,
    #[serde(default)]
    max_recall_results: u64,
    #[serde(default)]
    stable_prefix_mode: bool,
}

#[derive(Deserialize)]
struct IngestParams {
    agent_id: String,
    user_message: String,
    #[serde(default)]
    peer_id: Option<String>,
}

#[derive(Deserialize)]
struct AssembleParams {
    agent_id: String,
    messages: Vec<Message>,
    #[serde(default)]
    system_prompt: String,
    #[serde(default)]
    tools: Value,
    #[serde(default)]
    context_window_tokens: u64,
}

#[derive(Deserialize)]
struct AfterTurnParams {
    agent_id: String,
    messages: Vec<Message>,
}

fn params<T: DeserializeOwned>(method: Method, params: Value) -> Result<T, String> {
    serde_json::from_value(params).map_err(|e| format!("invalid params for `{}`: {e}", method.name()))
}

impl Methods {
    pub fn new(engine: Arc<StackEngine>, options: SidecarOptions) -> Methods {
        Methods {
            engine,
            options,
            turns: Arc::new(Turns::default()),
            settles: Mutex::new(Vec::new()),
            tools_tokens: Mutex::new(None),
        }
    }

    /// Counts an `after_turn` from the moment its line is read, so an
    /// `ingest` read after it waits for it.
    pub fn begin_turn(&self, method: Method, params: &Value) -> Option<TurnGuard> {
        let agent = params.get("agent_id").and_then(Value::as_str)?;
        (method == Method::AfterTurn).then(|| self.turns.begin(agent))
    }

    /// Runs one method; the `Err` text is what LibreFang logs before falling back.
    pub async fn call(self: &Arc<Self>, method: Method, raw: Value, turn: Option<TurnGuard>) -> Result<Value, String> {
        match method {
            Method::Bootstrap => self.bootstrap(params(method, raw)?).await,
            Method::Ingest => self.ingest(params(method, raw)?).await,
            Method::Assemble => self.assemble(params(method, raw)?).await,
            Method::AfterTurn => self.after_turn(params(method, raw)?, turn).await,
        }
    }

    async fn bootstrap(&self, p: BootstrapParams) -> Result<Value, String> {
        let request = BootstrapRequest {
            context_window_tokens: p.context_window_tokens,
            max_recall_results: p.max_recall_results,
            stable_prefix_mode: p.stable_prefix_mode,
            ..Default::default()
        };
        self.engine.bootstrap(&request).await.map_err(|e| e.to_string())?;
        Ok(json!({"engine": "ctxhost", "version": env!("CARGO_PKG_VERSION"), "plugins": self.engine.layer_names()}))
    }

    async fn ingest(&self, p: IngestParams) -> Result<Value, String> {
        if !self.turns.settled(&p.agent_id, self.options.ingest_wait).await {
            tracing::info!(
                agent = %p.agent_id,
                "ingest: the agent's previous after_turn is still running after {:?}; recalling without it",
                self.options.ingest_wait
            );
        }
        let request = IngestRequest {
            agent_id: p.agent_id.clone(),
            message: p.user_message,
            peer_id: p.peer_id,
            ..Default::default()
        };
        let recalled = self.engine.ingest(&request).await.map_err(|e| e.to_string())?;
        let agent = librefang::agent_uuid(&p.agent_id);
        let now = ids::rfc3339(SystemTime::now());
        let fragments: Vec<Value> = recalled.iter().map(|r| librefang::fragment(r, &agent, &now)).collect();
        Ok(json!({"recalled_memories": fragments}))
    }

    async fn assemble(&self, p: AssembleParams) -> Result<Value, String> {
        // The budget of the window: LibreFang's (0: the engine's configured
        // one) less what the tool definitions take.
        let base = match p.context_window_tokens {
            0 => self.engine.default_engine().settings().context_window_tokens,
            w => w,
        };
        let window = base.saturating_sub(self.tool_tokens(&p.tools)).max(1);
        let request = AssembleRequest {
            agent_id: p.agent_id,
            system_prompt: p.system_prompt,
            messages: p.messages,
            context_window_tokens: window,
            ..Default::default()
        };
        let assembled = self.engine.assemble(&request).await.map_err(|e| e.to_string())?;
        let counter = self.engine.default_engine().counter();
        let budget = usize::try_from(window).unwrap_or(usize::MAX);
        let used = |messages: &[Message]| counter.text(&request.system_prompt) + counter.messages(messages);
        let out = librefang::assemble_reply(&request.messages, assembled, used, budget);
        let agent = &request.agent_id;
        for n in &out.fixes {
            tracing::warn!(%agent, "assemble: {n}");
        }
        // assemble runs on every LLM iteration: a trim is its normal work.
        if out.leading_dropped > 0 {
            tracing::debug!(
                %agent,
                "assemble: dropped {} leading messages so the window starts with a user message",
                out.leading_dropped
            );
        }
        match out.recovery {
            librefang::Recovery::None => {}
            librefang::Recovery::FinalError => tracing::warn!(
                %agent,
                "assemble: the messages that must stay (pinned ones, the newest user message) and the system prompt \
                 take {} tokens, over the window of {budget}; told LibreFang `FinalError`",
                out.tokens
            ),
            other => tracing::debug!(%agent, "assemble: recovery {:?}", other),
        }
        Ok(out.value)
    }

    /// Tokens the tool definitions take from the window (LibreFang counts them too).
    fn tool_tokens(&self, tools: &Value) -> u64 {
        if tools.as_array().is_none_or(Vec::is_empty) {
            return 0;
        }
        let text = tools.to_string();
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        text.hash(&mut hasher);
        let key = hasher.finish();
        let mut cached = self.tools_tokens.lock().unwrap_or_else(|p| p.into_inner());
        let n = match *cached {
            Some((k, n)) if k == key => n,
            _ => {
                let n = self.engine.default_engine().counter().text(&text);
                *cached = Some((key, n));
                n
            }
        };
        u64::try_from(n).unwrap_or(u64::MAX)
    }

    /// Stores the turn and starts the plugins' `after_turn`; answers before
    /// they finish, but after the built-in memory write: a turn it could not
    /// store is an error reply. The turn stays counted until they have.
    async fn after_turn(self: &Arc<Self>, p: AfterTurnParams, turn: Option<TurnGuard>) -> Result<Value, String> {
        let request = AfterTurnRequest { agent_id: p.agent_id, messages: p.messages, ..Default::default() };
        self.engine.after_turn(&request).await.map_err(|e| e.to_string())?;
        let me = self.clone();
        let agent = request.agent_id;
        let settle = tokio::spawn(async move {
            let _turn = turn;
            // Only this agent's calls: another agent's slow plugin must not
            // hold up this agent's next ingest.
            me.engine.settle_agent(&agent).await;
        });
        let mut settles = self.settles.lock().unwrap_or_else(|p| p.into_inner());
        settles.retain(|h| !h.is_finished());
        settles.push(settle);
        Ok(json!({}))
    }

    /// Waits (up to the settle timeout) for every pending `after_turn`.
    /// Returns false when the timeout cut it short.
    pub async fn settle_all(&self) -> bool {
        let handles = std::mem::take(&mut *self.settles.lock().unwrap_or_else(|p| p.into_inner()));
        let all = async {
            for h in handles {
                let _ = h.await;
            }
            self.engine.settle().await;
        };
        tokio::time::timeout(self.options.settle_timeout, all).await.is_ok()
    }
}
