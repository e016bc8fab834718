//! Wasm plugins, run in-process: components of the `wit/ctxhost.wit` world
//! ([`component`]) and LibreFang's per-hook core modules ([`core_module`]),
//! on one shared engine, each call bounded by fuel, a deadline and a memory
//! cap. What both runners share (the deadline rule, the blocking pool) is here.
//!
//! A component call, by file: `engine` (the shared engine and its epoch
//! ticker) → `cache` (compiled code, trusted only when this host wrote it) →
//! `component` (load, link, describe, instantiate) → `store` (limits and the
//! per-call store) with `wasi` (what the guest sees of the host) →
//! `host_imports` / `service_imports` (what the guest may ask of the host) →
//! `call` (request in, reply out, the `Runner`) → `trap` (why a call failed)
//! and `convert` (WIT ↔ protocol types, bounded).

pub mod bindings;
mod cache;
mod call;
pub mod component;
mod convert;
pub mod core_module;
mod engine;
mod host_imports;
mod service_imports;
mod store;
mod trap;
mod wasi;

pub use convert::{AGENT_REPLY_BYTES, REPLY_BYTES, REPLY_ITEMS, ReplyTooLarge};

use serde_json::Value;

use crate::runner::{CallOptions, HookError};

/// The deadline of one call: `--timeout-secs` when given, else the plugin's.
pub(crate) fn call_timeout_ms(options: &CallOptions, plugin_default_ms: u64) -> u64 {
    options.timeout_secs.map_or(plugin_default_ms, |s| s.saturating_mul(1000))
}

/// Runs a wasm call on the blocking pool: it is CPU-bound (bounded by fuel
/// and its deadline) and must not hold an async worker.
pub(crate) async fn on_blocking_pool(
    call: impl FnOnce() -> Result<Value, HookError> + Send + 'static,
) -> Result<Value, HookError> {
    tokio::task::spawn_blocking(call).await.map_err(|e| HookError::Host(format!("the call's thread failed: {e}")))?
}

/// The limits every wasm call runs under, as [`crate::runner::SandboxFacts`].
pub(crate) fn sandbox_facts(limits: &store::Limits) -> crate::runner::SandboxFacts {
    crate::runner::SandboxFacts {
        layers: vec!["fuel", "deadline", "memory"],
        limits: [
            ("fuel", limits.fuel),
            ("deadline_ms", limits.timeout_ms),
            ("memory_bytes", limits.memory_mb.saturating_mul(1 << 20)),
        ]
        .into_iter()
        .collect(),
    }
}
