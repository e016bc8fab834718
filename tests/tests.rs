//! ctxhost's integration tests, one module per capability.
//!
//! - `manifest`: plugin.toml loading, placements, path confinement, errors.
//! - `runtimes`: the guest examples through their real interpreters.
//! - `wire`: stdout reading rules, exit labels and stdin handling through real processes.
//! - `limits`: timeouts, output caps, process-group cleanup.
//! - `env`: what a hook's environment holds, and what it must not.
//! - `launchers`: launcher lookup, shims, custom and native launchers.
//! - `catalog`: one status per plugin: doctor, plugin list and the daemon's routes agree; each plugin loaded once.
//! - `cli`: `ctxhost hook` and `ctxhost doctor` as a user runs them.
//! - `errors`: each kind of hook failure from a real plugin, with its HTTP status.
//! - `stack`: the engine over a stack of plugins, with LibreFang-style fixtures.
//! - `wasm`: component plugins on wasmtime.
//! - `server`: `ctxhost serve`, its routes and hot reload.
//! - `sidecar`: `ctxhost sidecar` driven with LibreFang's request lines.
//! - `scaffold`: `ctxhost new` for every runtime, each template run as generated.
//! - `plugins`: `ctxhost plugin list|install|remove|enable|disable|grant`.
//! - `sandbox`: the script sandbox (Landlock, network namespace, cgroup limits), as root and unprivileged.
//! - `agent`: the agent loop (agent-hooks.md): the guard three ways, combine rules, config, triggers, schedules.
//! - `workers`: persistent workers: examples in both modes, faults, respawn and retry, leaks, reload.
//! - `attacks`: the attack catalogue (issue 13): what a hostile plugin tries, and that it fails.
//! - `memory`: the built-in memory on each backend (SQLite, PostgreSQL): one shared recall set, idempotent and concurrent writes.
//! - `store`: the state store (`state.db`): old JSON files imported, a corrupt one kept, failed writes, two processes.
//! - `layers`: the module layers of `src/` only point down.
//! - `docs_reference`: `docs/reference/*.md` against the code: hooks and their fields, manifest and config keys, routes.
//! - `faustbot`: FaustBot plugins (plugin.json + impl.py) unmodified: the examples, every hook sync and async, deps, lifecycle.
//! - `dashboard`: the dashboard page in headless Chromium and Firefox against a real daemon: every view, the actions, what it shows.
//! - `trusted`: the operator's trusted plugin: its keeper shares ctxhost's memory, tethered all the same, as root and unprivileged.
//! - `forkserver`: one-shot Python hooks through the per-plugin fork server: both paths agree, leftovers die, the sandbox holds.
//! - `docs_examples`: every shell example of README.md and docs/ is run (marked runnable) or names the test that runs it.

// Tests: a panic is a failed test (Cargo.toml denies these in ctxhost's code).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod util;

mod agent;
mod attacks;
mod catalog;
mod cli;
mod cluster;
mod dashboard;
mod docs_examples;
mod docs_reference;
mod env;
mod errors;
mod faust_shim;
mod faustbot;
mod forkserver;
mod launchers;
mod layers;
mod limits;
mod manifest;
mod memory;
mod plugins;
mod runtimes;
mod sandbox;
mod scaffold;
mod server;
mod sidecar;
mod stack;
mod store;
mod trusted;
mod wasm;
mod wire;
mod workers;
