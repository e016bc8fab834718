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
//! - `component`: component plugins (storage quota, reply size, `.cwasm`,
//!   `[sandbox] dirs` widened through plugin.toml).
//!
//! When the tests run as root, the catalogue runs again as uid 65534 (the
//! last test here): a daemon without privileges must hold as well. The
//! component attacks are left out of that run (their guests are built with
//! cargo, which that user may not reach; the wasm runner does not depend on
//! the uid).

mod component;
mod faust_deps;
mod host;
mod http;
mod paths;
mod sandbox;

/// The catalogue again as uid 65534 (when the tests run as root).
#[test]
fn the_attacks_fail_for_an_unprivileged_daemon_too() {
    crate::util::nobody::rerun_as_nobody(
        "attacks::",
        &["attacks::component", "attacks::the_attacks_fail_for_an_unprivileged_daemon_too"],
        &["tests/fixtures", "guest-examples/faustbot", "guest-examples/rpc-clients"],
        24,
    );
}
