//! LibreFang's core-module wasm hooks (spec section 11), run unmodified under
//! the same fuel, deadline and memory limits as components.
//!
//! ABI: the guest exports `memory`, `alloc(size: i32) -> i32` and
//! `execute(ptr: i32, len: i32) -> i64`; the host writes the request JSON
//! into memory it allocated, calls `execute`, and reads the reply JSON at
//! `(ptr << 32) | len` (at most 1 MiB). Imports, module `librefang`:
//! `host_call(ptr, len) -> i64` (every method is denied for hooks: the reply
//! is `{"error": …}`, packed the same way) and `host_log(level, ptr, len)`.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;
use wasmtime::{Caller, Engine, Linker, Module, Store, StoreLimits, StoreLimitsBuilder};

use super::engine::engine;
use super::store::Limits;
use crate::protocol::{HookName, HookRequest, parse_stdout};
use crate::runner::HookError;

/// Replies larger than this are refused.
const MAX_REPLY: usize = 1 << 20;

struct CoreState {
    limits: StoreLimits,
    plugin: String,
}

/// The hooks of one plugin, each a compiled core module.
pub struct CoreModuleRunner {
    name: String,
    modules: BTreeMap<HookName, Module>,
    linker: Linker<CoreState>,
    limits: Limits,
}

/// True for a binary core module (`\0asm` version 1), and for WAT text.
pub fn is_core_module(bytes: &[u8]) -> bool {
    bytes.starts_with(b"\0asm\x01\0\0\0") || !bytes.starts_with(b"\0asm")
}

impl CoreModuleRunner {
    /// Compiles each hook's module.
    ///
    /// # Errors
    /// A module that does not compile, or imports something other than
    /// `librefang.host_call` / `librefang.host_log` (named in the message).
    pub fn load(name: &str, hooks: &BTreeMap<HookName, &Path>, limits: Limits) -> Result<Self, HookError> {
        let engine = engine().map_err(HookError::Host)?;
        let mut modules = BTreeMap::new();
        for (hook, path) in hooks {
            let fail = |reason: String| HookError::Load { what: "module", path: path.to_path_buf(), reason };
            // The checked (canonical) path, never through a link swapped in since.
            let bytes =
                crate::manifest::beneath::read_no_symlinks(path, u64::MAX).map_err(|e| fail(e.reason.to_string()))?;
            let module = Module::new(engine, &bytes).map_err(|e| fail(format!("cannot compile it: {e:#}")))?;
            for import in module.imports() {
                if import.module() != "librefang" || !matches!(import.name(), "host_call" | "host_log") {
                    return Err(fail(format!(
                        "imports `{}.{}`, which is not allowed (only librefang.host_call and librefang.host_log)",
                        import.module(),
                        import.name()
                    )));
                }
            }
            modules.insert(*hook, module);
        }
        let linker = linker(engine).map_err(|e| HookError::Host(format!("cannot link the host functions: {e}")))?;
        Ok(CoreModuleRunner { name: name.to_owned(), modules, linker, limits })
    }

    pub fn hooks(&self) -> impl Iterator<Item = HookName> + '_ {
        self.modules.keys().copied()
    }

    /// Runs `request` through its hook's module and returns the reply JSON.
    pub fn call_sync(&self, request: &HookRequest, timeout_ms: u64) -> Result<Value, HookError> {
        let hook = request.hook();
        let Some(module) = self.modules.get(&hook) else {
            return Err(HookError::not_declared(&self.name, hook, self.modules.keys().copied()));
        };
        let limits = StoreLimitsBuilder::new()
            .memory_size(usize::try_from(self.limits.memory_mb.saturating_mul(1 << 20)).unwrap_or(usize::MAX))
            .instances(1)
            .trap_on_grow_failure(true)
            .build();
        let mut store = Store::new(module.engine(), CoreState { limits, plugin: self.name.clone() });
        store.limiter(|s| &mut s.limits);
        let _ = store.set_fuel(self.limits.fuel);
        store.set_epoch_deadline(timeout_ms.max(1));
        let result = run(&self.linker, module, &mut store, &request.to_json_line());
        result.unwrap_or_else(|e| {
            let used = self.limits.fuel.saturating_sub(store.get_fuel().unwrap_or(0));
            Err(super::trap::classify(&e, used, timeout_ms, self.limits.memory_mb, ""))
        })
    }
}

fn linker(engine: &Engine) -> wasmtime::Result<Linker<CoreState>> {
    let mut linker = Linker::new(engine);
    linker.func_wrap(
        "librefang",
        "host_log",
        |mut caller: Caller<'_, CoreState>, level: i32, ptr: i32, len: i32| {
            let text = read(&mut caller, ptr, len).unwrap_or_default();
            let plugin = caller.data().plugin.clone();
            match level {
                0 | 1 => tracing::debug!(target: "plugin_log", plugin, "{text}"),
                2 => tracing::info!(target: "plugin_log", plugin, "{text}"),
                3 => tracing::warn!(target: "plugin_log", plugin, "{text}"),
                _ => tracing::error!(target: "plugin_log", plugin, "{text}"),
            }
        },
    )?;
    linker.func_wrap("librefang", "host_call", |mut caller: Caller<'_, CoreState>, ptr: i32, len: i32| {
        let method = read(&mut caller, ptr, len)
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .and_then(|v| v.get("method").and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_default();
        let reply = serde_json::json!({"error": format!("host call `{method}` is not available to hooks")}).to_string();
        write_packed(&mut caller, reply.as_bytes())
    })?;
    Ok(linker)
}

fn memory(caller: &mut Caller<'_, CoreState>) -> Option<wasmtime::Memory> {
    caller.get_export("memory").and_then(|e| e.into_memory())
}

fn read(caller: &mut Caller<'_, CoreState>, ptr: i32, len: i32) -> Option<String> {
    let mem = memory(caller)?;
    let data = mem.data(&caller);
    let (ptr, len) = (usize::try_from(ptr).ok()?, usize::try_from(len).ok()?);
    data.get(ptr..ptr.checked_add(len)?).map(|b| String::from_utf8_lossy(b).into_owned())
}

/// Allocates in the guest, copies `bytes` there and packs `(ptr << 32) | len`.
fn write_packed(caller: &mut Caller<'_, CoreState>, bytes: &[u8]) -> wasmtime::Result<i64> {
    let alloc = caller
        .get_export("alloc")
        .and_then(|e| e.into_func())
        .ok_or_else(|| wasmtime::format_err!("the module exports no `alloc`"))?
        .typed::<i32, i32>(&caller)?;
    let len = i32::try_from(bytes.len())?;
    let ptr = alloc.call(&mut *caller, len)?;
    let mem = memory(caller).ok_or_else(|| wasmtime::format_err!("the module exports no `memory`"))?;
    mem.write(&mut *caller, usize::try_from(ptr)?, bytes)?;
    Ok((i64::from(ptr) << 32) | i64::from(len))
}

/// Runs the module: `Err` when the wasm failed (a trap, a missing export);
/// `Ok(Err(_))` when it returned a reply the host cannot use.
fn run(
    linker: &Linker<CoreState>,
    module: &Module,
    store: &mut Store<CoreState>,
    request: &[u8],
) -> wasmtime::Result<Result<Value, HookError>> {
    let instance = linker.instantiate(&mut *store, module)?;
    let mem = instance
        .get_memory(&mut *store, "memory")
        .ok_or_else(|| wasmtime::format_err!("the module exports no `memory`"))?;
    let alloc = instance.get_typed_func::<i32, i32>(&mut *store, "alloc")?;
    let execute = instance.get_typed_func::<(i32, i32), i64>(&mut *store, "execute")?;
    let len = i32::try_from(request.len())?;
    let ptr = alloc.call(&mut *store, len)?;
    mem.write(&mut *store, usize::try_from(ptr)?, request)?;
    let packed = execute.call(&mut *store, (ptr, len))?;
    let (out_ptr, out_len) = ((packed >> 32) as u32 as usize, (packed & 0xffff_ffff) as u32 as usize);
    if out_len > MAX_REPLY {
        return Ok(Err(HookError::BadReply(format!("the reply is {out_len} bytes, over the 1 MiB limit"))));
    }
    let Some(bytes) = mem.data(&*store).get(out_ptr..out_ptr.saturating_add(out_len)) else {
        return Ok(Err(HookError::BadReply("the reply points outside the module's memory".to_owned())));
    };
    Ok(parse_stdout(bytes).map_err(HookError::from))
}

/// A core-module plugin as a [`crate::runner::Runner`].
#[derive(Clone)]
pub struct CoreModuleHandle(pub std::sync::Arc<CoreModuleRunner>);

impl crate::runner::Runner for CoreModuleHandle {
    fn sandbox(&self) -> crate::runner::SandboxFacts {
        super::sandbox_facts(&self.0.limits)
    }

    fn call<'a>(
        &'a self,
        request: &'a HookRequest,
        options: &'a crate::runner::CallOptions,
    ) -> crate::runner::BoxFuture<'a, Result<Value, HookError>> {
        Box::pin(async move {
            let timeout_ms = super::call_timeout_ms(options, self.0.limits.timeout_ms);
            let (runner, request) = (self.0.clone(), request.clone());
            super::on_blocking_pool(move || runner.call_sync(&request, timeout_ms)).await
        })
    }
}
