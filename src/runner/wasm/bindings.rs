//! Host-side bindings of `wit/ctxhost.wit`, generated at build time: the
//! world `context-plugin` (types, `host`, the context hooks) here, and what
//! the world `agent-plugin` adds — the `services` import and the `agent`
//! export — in [`agent`], sharing this module's types.

wasmtime::component::bindgen!({
    path: "wit",
    world: "context-plugin",
});

/// The additions of the world `agent-plugin`. Only its `services` import and
/// `agent` export are used: a component is linked for both worlds at once and
/// the `agent` export is looked up, not required.
pub mod agent {
    wasmtime::component::bindgen!({
        path: "wit",
        world: "agent-plugin",
        with: {
            "ctxhost:plugin/types": super::ctxhost::plugin::types,
            "ctxhost:plugin/host": super::ctxhost::plugin::host,
        },
    });
}
