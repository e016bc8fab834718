//! A component plugin: compiled (through the `.cwasm` cache), checked
//! against the world version and the import policy, linked once into an
//! `InstancePre`, and asked to describe itself. Two worlds load here:
//! `context-plugin` (the context hooks, listed by `describe`) and
//! `agent-plugin` (also the `agent` export — `describe-agent` at load,
//! `handle` per agent-loop hook — and the `services` import); the linker
//! always provides `host`, `services` and WASI without network.
//!
//! Owns loading and instantiating: each call gets a fresh instance in a fresh
//! store (`store`), and a failure comes back classified (`trap`). The calls
//! themselves are in `call`. Never reuses a store, never loads a component
//! whose imports it does not provide, and never decides what an agent-loop
//! reply means (that is `agent::decision`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwapOption;
use serde_json::{Map, Value};
use wasmtime::Engine;
use wasmtime::Store;
use wasmtime::component::{Component, HasSelf, Instance, InstancePre, Linker};

use super::bindings::agent::ctxhost::plugin::services;
use super::bindings::agent::exports::ctxhost::plugin::agent::GuestIndices as AgentIndices;
use super::bindings::ctxhost::plugin::types as wit;
use super::bindings::{ContextPlugin, ContextPluginIndices};
use super::cache::compile;
use super::convert::{self, ReplyTooLarge};
use super::host_imports::SharedUsage;
use super::store::CallEnv;
use super::trap;
use crate::host::services::PluginServices;
use crate::manifest::AgentDecl;
use crate::protocol::HookName;
use crate::runner::HookError;

pub use super::call::ComponentHandle;
pub use super::engine::{bench_engine, engine};
pub use super::host_imports::STORAGE_KEY_BYTES;
pub use super::store::{Limits, State};

/// A loaded component plugin.
pub struct ComponentRunner {
    pub(super) name: String,
    pub(super) pre: InstancePre<State>,
    pub(super) context: ContextPluginIndices,
    /// Present when the component exports the `agent` interface.
    pub(super) agent: Option<AgentExport>,
    /// Context hooks (`describe`) and agent-loop hooks (`describe-agent`).
    pub(super) hooks: BTreeSet<HookName>,
    pub(super) limits: Limits,
    pub(super) config: Map<String, Value>,
    pub(super) data_dir: PathBuf,
    /// What the `host.storage-*` storage holds, shared by every call.
    pub(super) storage_usage: SharedUsage,
    pub(super) from_cache: bool,
    /// The host services of the `services` import; the last attached wins.
    pub(super) services: ArcSwapOption<PluginServices>,
}

/// The `agent` export of an `agent-plugin` component.
pub(super) struct AgentExport {
    pub(super) indices: AgentIndices,
    pub(super) decl: AgentDecl,
}

/// The interface a component exports to take part in the agent loop.
pub(super) const AGENT_EXPORT: &str = "ctxhost:plugin/agent@0.1.0";

/// Reads `describe-agent`'s JSON: the agent-loop hooks it lists and the
/// declarations [`AgentDecl::from_json`] reads.
fn read_describe_agent(text: &str) -> Result<(BTreeSet<HookName>, AgentDecl), String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("its describe-agent reply is not JSON: {e}"))?;
    if !value.is_object() {
        return Err(format!(
            "its describe-agent reply must be a JSON object, not {}",
            crate::protocol::json_kind(&value)
        ));
    }
    let mut hooks = BTreeSet::new();
    match value.get("hooks") {
        None | Some(Value::Null) => {}
        Some(Value::Array(names)) => {
            for name in names {
                let Some(name) = name.as_str() else {
                    return Err(format!("its describe-agent `hooks` must list hook names, not {name}"));
                };
                let hook: HookName = name.parse().map_err(|_| {
                    let hint = crate::hint::did_you_mean(name, HookName::AGENT.iter().map(|h| h.as_str()));
                    format!("its describe-agent `hooks` lists `{name}`, which is not an agent-loop hook{hint}")
                })?;
                if !HookName::AGENT.contains(&hook) {
                    return Err(format!(
                        "its describe-agent `hooks` lists `{name}`, a context hook: context hooks are listed by `describe`"
                    ));
                }
                hooks.insert(hook);
            }
        }
        Some(other) => return Err(format!("its describe-agent `hooks` must be a list, not {other}")),
    }
    let decl = AgentDecl::from_json(&value).map_err(|e| format!("its describe-agent reply: {e}"))?;
    Ok((hooks, decl))
}

fn hook_of(h: wit::Hook) -> HookName {
    match h {
        wit::Hook::Bootstrap => HookName::Bootstrap,
        wit::Hook::Ingest => HookName::Ingest,
        wit::Hook::Assemble => HookName::Assemble,
        wit::Hook::Compact => HookName::Compact,
        wit::Hook::AfterTurn => HookName::AfterTurn,
        wit::Hook::TransformToolResult => HookName::TransformToolResult,
        wit::Hook::PrepareSubagent => HookName::PrepareSubagent,
        wit::Hook::MergeSubagent => HookName::MergeSubagent,
    }
}

impl ComponentRunner {
    /// Compiles and links `wasm` and asks it to describe itself.
    ///
    /// # Errors
    /// Not a component, built for another world version, an import outside
    /// the policy, or `describe` failing.
    pub fn load(
        name: &str,
        wasm: &Path,
        limits: Limits,
        config: Map<String, Value>,
        data_dir: PathBuf,
        cache_dir: Option<&Path>,
    ) -> Result<Self, HookError> {
        let shared = engine().map_err(HookError::Host)?;
        Self::load_with_engine(shared, name, wasm, limits, config, data_dir, cache_dir)
    }

    /// [`ComponentRunner::load`] on another engine (benchmarks).
    #[doc(hidden)]
    #[allow(clippy::too_many_arguments)] // `load`'s arguments plus the engine
    pub fn load_with_engine(
        engine: &Engine,
        name: &str,
        wasm: &Path,
        limits: Limits,
        config: Map<String, Value>,
        data_dir: PathBuf,
        cache_dir: Option<&Path>,
    ) -> Result<Self, HookError> {
        let fail = |reason: String| HookError::Load { what: "component", path: wasm.to_owned(), reason };
        // The checked (canonical) path, never through a link swapped in since.
        let bytes =
            crate::manifest::beneath::read_no_symlinks(wasm, u64::MAX).map_err(|e| fail(e.reason.to_string()))?;
        if !wasmparser_is_component(&bytes) {
            return Err(fail("not a WebAssembly component (build it with `--target wasm32-wasip2`)".into()));
        }
        let (component, from_cache) = compile(engine, &bytes, cache_dir).map_err(fail)?;
        check_world_version(&component, engine).map_err(fail)?;
        let mut linker: Linker<State> = Linker::new(engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(|e| fail(e.to_string()))?;
        ContextPlugin::add_to_linker::<State, HasSelf<State>>(&mut linker, |s| s).map_err(|e| fail(e.to_string()))?;
        services::add_to_linker::<State, HasSelf<State>>(&mut linker, |s| s).map_err(|e| fail(e.to_string()))?;
        let pre = linker.instantiate_pre(&component).map_err(|e| fail(describe_link_error(&e)))?;
        let context = ContextPluginIndices::new(&pre)
            .map_err(|e| fail(format!("does not implement ctxhost:plugin@0.1.0: {e:#}")))?;
        let agent = match component.get_export_index(None, AGENT_EXPORT) {
            None => None,
            Some(_) => Some(AgentIndices::new(&pre).map_err(|e| {
                fail(format!("exports `{AGENT_EXPORT}` but not as the world agent-plugin defines it: {e:#}"))
            })?),
        };
        let mut runner = ComponentRunner {
            name: name.to_owned(),
            pre,
            context,
            agent: None,
            hooks: BTreeSet::new(),
            limits,
            config,
            data_dir,
            storage_usage: SharedUsage::default(),
            from_cache,
            services: ArcSwapOption::empty(),
        };
        let timeout_ms = runner.limits.timeout_ms;
        let description = runner.with_context(timeout_ms, CallEnv::export("describe"), |p, s| p.call_describe(s))?;
        runner.hooks = description.hooks.into_iter().map(hook_of).collect();
        if let Some(indices) = agent {
            let text = runner.with_instance(timeout_ms, CallEnv::export("describe-agent"), |instance, store| {
                indices.load(&mut *store, instance)?.call_describe_agent(store)
            })?;
            check_agent_reply("describe-agent", &text)?;
            let (hooks, decl) = read_describe_agent(&text).map_err(|m| fail(format!("plugin '{name}': {m}")))?;
            runner.hooks.extend(hooks);
            runner.agent = Some(AgentExport { indices, decl });
        }
        Ok(runner)
    }

    /// Attaches the host services the `services` import reaches; the last
    /// attached wins. Calls already running keep the ones they started with.
    pub fn attach_services(&self, services: Arc<PluginServices>) {
        self.services.store(Some(services));
    }

    /// Whether the component exports the `agent` interface.
    pub fn is_agent_plugin(&self) -> bool {
        self.agent.is_some()
    }

    /// Whether the compiled code came from the `.cwasm` cache.
    pub fn from_cache(&self) -> bool {
        self.from_cache
    }

    /// The hooks the component says it implements.
    pub fn hooks(&self) -> &BTreeSet<HookName> {
        &self.hooks
    }

    /// What the component declares for the agent loop (`describe-agent`),
    /// when it exports the agent interface.
    pub fn agent_decl(&self) -> Option<&AgentDecl> {
        self.agent.as_ref().map(|a| &a.decl)
    }

    /// A fresh instance in a fresh store, `f` called on it, traps turned into
    /// errors a user can act on.
    pub(super) fn with_instance<T>(
        &self,
        timeout_ms: u64,
        env: CallEnv,
        f: impl FnOnce(&Instance, &mut Store<State>) -> wasmtime::Result<T>,
    ) -> Result<T, HookError> {
        let export = env.export;
        let (mut store, output) = self.store(timeout_ms, env)?;
        let result = self.pre.instantiate(&mut store).and_then(|instance| f(&instance, &mut store));
        output.log(&self.name);
        result.map_err(|e| {
            // wasmtime's (private) error for data past the hostcall fuel.
            if format!("{e:#}").contains("fuel allocated for hostcalls has been exhausted") {
                return ReplyTooLarge::Lifted { hook: export, limit: convert::REPLY_BYTES }.into();
            }
            let used = self.limits.fuel.saturating_sub(store.get_fuel().unwrap_or(0));
            let stderr = String::from_utf8_lossy(&output.stderr.contents().0).into_owned();
            trap::classify(&e, used, timeout_ms, self.limits.memory_mb, &stderr)
        })
    }

    /// [`ComponentRunner::with_instance`] with the context-plugin exports.
    pub(super) fn with_context<T>(
        &self,
        timeout_ms: u64,
        env: CallEnv,
        f: impl FnOnce(&ContextPlugin, &mut Store<State>) -> wasmtime::Result<T>,
    ) -> Result<T, HookError> {
        self.with_instance(timeout_ms, env, |instance, store| {
            let plugin = self.context.load(&mut *store, instance)?;
            f(&plugin, store)
        })
    }
}

/// `text` when it is within [`convert::AGENT_REPLY_BYTES`]: JSON text becomes
/// host objects many times its size.
pub(super) fn check_agent_reply<'a>(export: &'static str, text: &'a str) -> Result<&'a str, ReplyTooLarge> {
    if text.len() > convert::AGENT_REPLY_BYTES {
        return Err(ReplyTooLarge::Bytes { hook: export, limit: convert::AGENT_REPLY_BYTES });
    }
    Ok(text)
}

/// The component-model layer byte of the binary header tells a component
/// (`0d 00 01 00`) from a core module (`01 00 00 00`).
fn wasmparser_is_component(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && &bytes[..4] == b"\0asm" && bytes[4..8] == [0x0d, 0x00, 0x01, 0x00]
}

/// The world version this host implements.
pub const WORLD_VERSION: &str = "0.1.0";

/// Refuses a component that imports `ctxhost:plugin/…` of another
/// compatible-version line (0.x: another minor; else another major), naming both.
fn check_world_version(component: &Component, engine: &Engine) -> Result<(), String> {
    let line = |v: &str| {
        let mut parts = v.split('.');
        let (major, minor) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        if major == "0" { format!("0.{minor}") } else { major.to_owned() }
    };
    for (name, _) in component.component_type().imports(engine) {
        let Some(rest) = name.strip_prefix("ctxhost:plugin/") else { continue };
        let version = rest.split_once('@').map_or("", |(_, v)| v);
        if line(version) != line(WORLD_VERSION) {
            return Err(format!(
                "built for ctxhost:plugin@{version}, but this host implements ctxhost:plugin@{WORLD_VERSION}; \
                 rebuild it against this host's wit/ctxhost.wit"
            ));
        }
    }
    Ok(())
}

fn describe_link_error(e: &wasmtime::Error) -> String {
    format!(
        "imports something ctxhost does not provide (only WASI without network, ctxhost:plugin/host@0.1.0 and \
         ctxhost:plugin/services@0.1.0): {e:#}"
    )
}
