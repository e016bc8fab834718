//! Host-side bindings of `wit/ctxhost.wit`, generated at build time.

wasmtime::component::bindgen!({
    path: "wit",
    world: "context-plugin",
});
