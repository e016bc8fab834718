//! The attack catalogue (issue 13): every way out a hostile plugin tried,
//! performed for real against ctxhost, each test checking the *effect* —
//! the file outside unchanged, the secret absent, the process dead — never
//! only ctxhost's error text. One module per surface; each test's doc
//! comment says what the attacker tries and what must hold.
//!
//! - `sandbox`: script hooks — pinned grants, metadata changes, identity,
//!   seccomp, escaped daemons, other processes' `/proc`, inherited fds.
//! - `faust_deps`: FaustBot dependency installs (planted modules, sdists).
//! - `paths`: plugin-controlled paths the host reads (frontend, plugin.toml).
//! - `http`: the daemon under slow, idle and huge requests; doctor floods.
//! - `host`: `[env]` expansion, persistent-worker replies, after_turn
//!   writes, state files, stale temp dirs.
//! - `component`: component plugins (storage quota, reply size, `.cwasm`).

mod component;
mod faust_deps;
mod host;
mod http;
mod paths;
mod sandbox;
