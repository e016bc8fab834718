//! ctxhost's integration tests, one module per capability.
//!
//! - `manifest`: plugin.toml loading, placements, path confinement, errors.
//! - `runtimes`: the guest examples through their real interpreters.
//! - `wire`: stdout reading rules, exit labels and stdin handling through real processes.
//! - `limits`: timeouts, output caps, process-group cleanup.
//! - `env`: what a hook's environment holds, and what it must not.
//! - `launchers`: launcher lookup, shims, custom and native launchers.
//! - `cli`: `ctxhost hook` and `ctxhost doctor` as a user runs them.
//! - `stack`: the engine over a stack of plugins, with LibreFang-style fixtures.
//! - `wasm`: component plugins on wasmtime.

mod util;

mod cli;
mod env;
mod launchers;
mod limits;
mod manifest;
mod runtimes;
mod stack;
mod wasm;
mod wire;
