//! Component plugins (see `attacks/mod.rs`): the `host.storage-*` quota, the
//! size of a reply before it becomes host objects, the `.cwasm` cache trust
//! check, sockets, and the text of a guest panic. The hostile component
//! (`guest-examples/hostile`) performs each attack when its `ingest` message
//! names it.

use std::path::{Path, PathBuf};

use ctxhost::host::services::quota;
use ctxhost::protocol::{HookName, HookRequest};
use ctxhost::runner::wasm::component::{ComponentRunner, Limits};
use ctxhost::runner::wasm::{REPLY_BYTES, REPLY_ITEMS};
use serde_json::json;

use crate::util::examples::component;

/// `ingest` with `message`, the first memory's content or the error text.
fn order(runner: &ComponentRunner, message: &str) -> Result<String, String> {
    let req = HookRequest::from_json(HookName::Ingest, json!({"agent_id": "a", "message": message})).unwrap();
    runner
        .call_sync(&req)
        .map(|v| v["memories"][0]["content"].as_str().unwrap_or_default().to_owned())
        .map_err(|e| e.to_string())
}

/// The hostile component with its storage in `data` (compiled afresh:
/// under a second).
fn hostile(data: &Path) -> ComponentRunner {
    let wasm = component("hostile");
    ComponentRunner::load("hostile", &wasm, Limits::default(), Default::default(), data.into(), None).unwrap()
}

/// The `kv-*` files in `dir` (the context-world storage): how many, their
/// bytes, and the bytes they take on disk (allocated blocks).
fn storage_on_disk(dir: &Path) -> (usize, u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let (mut files, mut bytes, mut on_disk) = (0, 0, 0);
    let Ok(entries) = std::fs::read_dir(dir) else { return (0, 0, 0) };
    for entry in entries {
        let entry = entry.unwrap();
        if entry.file_name().to_string_lossy().starts_with("kv-") {
            let meta = entry.metadata().unwrap();
            files += 1;
            bytes += meta.len();
            on_disk += meta.blocks() * 512;
        }
    }
    (files, bytes, on_disk)
}

/// The attacker writes a 10 MB value through `host.storage-set`, then 20,000
/// one-byte keys, all in one call. Must hold: the big value is refused naming
/// the value quota; at most `quota::STORAGE_KEYS` keys are kept and the rest
/// refused naming the key quota; on disk the storage holds no more files than
/// that, no more bytes than `quota::STORAGE_PLUGIN_BYTES`, and takes no more
/// than that plus a 4 KiB block per file (`st_blocks`).
#[test]
fn a_storage_flood_through_the_context_world_stops_at_the_quota() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let runner = hostile(&data);
    let said = order(&runner, "storage-flood").unwrap();
    assert!(said.starts_with("big: denied: "), "the 10 MB value is refused: {said}");
    assert!(said.contains(&format!("at most {} bytes", quota::STORAGE_VALUE_BYTES)), "{said}");
    assert!(said.contains(&format!("kept {} keys", quota::STORAGE_KEYS)), "{said}");
    assert!(said.contains(&format!("{} storage keys already", quota::STORAGE_KEYS)), "{said}");
    let (files, bytes, on_disk) = storage_on_disk(&data);
    assert!(files <= quota::STORAGE_KEYS, "{files} storage files on disk");
    assert!(bytes <= quota::STORAGE_PLUGIN_BYTES as u64, "{bytes} bytes stored");
    let bound = quota::STORAGE_PLUGIN_BYTES as u64 + files as u64 * 4096;
    assert!(on_disk <= bound, "{on_disk} bytes on disk, more than {bound}");
    assert!(!data.join(format!("kv-{}", hex::encode("big"))).exists(), "the refused value left a file");
    // A later call (a fresh store) is held to the same count: it may only
    // overwrite the keys it has.
    let again = order(&runner, "storage-flood").unwrap();
    assert!(again.contains("storage keys already"), "{again}");
    assert_eq!(storage_on_disk(&data).0, files);
}

/// The attacker stores under a 200-byte key: as a hex file name it would pass
/// the 255-byte file-name limit. Must hold: the call is refused with an error
/// naming the key length and the limit, and no file is written.
#[test]
fn a_storage_key_too_long_for_a_file_name_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let said = order(&hostile(&data), "storage-long-key").unwrap();
    assert!(said.starts_with("denied: storage key of 200 bytes is too long"), "{said}");
    assert!(said.contains("at most 126 bytes"), "{said}");
    assert_eq!(storage_on_disk(&data), (0, 0, 0));
}

/// A plugin dir for the hostile component (64 MiB of guest memory, the
/// default), and a home whose compile cache (a dir of the running user) is
/// warmed by one harmless call, so the measured calls do not compile.
fn hostile_plugin(root: &Path) -> (PathBuf, PathBuf) {
    let dir = root.join("plugins/hostile");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(component("hostile"), dir.join("hostile.wasm")).unwrap();
    std::fs::write(
        dir.join("plugin.toml"),
        "name = \"hostile\"\nversion = \"1\"\nruntime = \"wasm\"\ncomponent = \"hostile.wasm\"\n\
         [sandbox]\nmemory_mb = 64\nfuel = 5_000_000_000\n",
    )
    .unwrap();
    let home = root.join("home");
    let (status, _, _) = hook_with_peak_rss(&home, &dir, "warm-up");
    assert!(status.success());
    (dir, home)
}

/// `ctxhost --home <home> hook <dir> ingest` on `message`: its exit status,
/// stderr, and peak resident set in KiB (`ru_maxrss` of exactly that child,
/// through `wait4`).
fn hook_with_peak_rss(home: &Path, dir: &Path, message: &str) -> (std::process::ExitStatus, String, i64) {
    use std::io::{Read, Write};
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Command, Stdio};
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("ctxhost"))
        .env_remove("RUST_LOG")
        .env_remove("CTXHOST_HOME")
        .env_remove("CTXHOST_PLUGINS_DIR")
        .arg("--home")
        .arg(home)
        .args(["hook", dir.to_str().unwrap(), "ingest"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(json!({"agent_id": "a", "message": message}).to_string().as_bytes()).unwrap();
    drop(stdin);
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    let pid = i32::try_from(child.id()).unwrap();
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our unreaped child; the pointers are valid for the call.
    let waited = unsafe { libc::wait4(pid, &raw mut status, 0, &raw mut usage) };
    assert_eq!(waited, pid, "wait4: {}", std::io::Error::last_os_error());
    std::mem::forget(child); // reaped here, not by `Child`
    (std::process::ExitStatus::from_raw(status), stderr, usage.ru_maxrss)
}

/// What a hostile reply may add to the host's memory over a harmless call of
/// the same `ctxhost hook`: the guest's own 64 MiB (it lives in the host
/// process), the reply limit twice (the guest's bytes and what is parsed of
/// them) and 16 MiB of slack — far below what 600,000 memories cost as JSON
/// objects (~0.5 GB before the fix). Relative to the harmless call, so a
/// bigger binary does not move it.
const PEAK_RSS_GROWTH_KIB: i64 = (64 + 16) * 1024 + 2 * (REPLY_BYTES as i64) / 1024;

/// The attacker's guest (64 MiB) answers `ingest` with 600,000 one-byte
/// memories, then with one 40 MB string. Must hold: each call fails naming
/// the reply limit, and the `ctxhost hook` process's peak RSS (`wait4`'s
/// `ru_maxrss`) stays within [`PEAK_RSS_GROWTH_KIB`] of a harmless call's.
#[test]
fn a_reply_too_big_for_the_host_fails_at_the_limit_with_memory_bounded() {
    let root = tempfile::tempdir().unwrap();
    let (dir, home) = hostile_plugin(root.path());
    let (status, stderr, harmless_kib) = hook_with_peak_rss(&home, &dir, "memories:10");
    assert!(status.success(), "a harmless call: {stderr}");
    let bound = harmless_kib + PEAK_RSS_GROWTH_KIB;
    for (message, limit) in [
        ("memories:600000", format!("at most {} bytes may pass", REPLY_BYTES)),
        ("memories:150000", format!("at most {} items", REPLY_ITEMS)),
        ("huge-string:40000000", format!("at most {} bytes may pass", REPLY_BYTES)),
    ] {
        let (status, stderr, peak_kib) = hook_with_peak_rss(&home, &dir, message);
        assert!(!status.success(), "{message}: {stderr}");
        let last = stderr.lines().last().unwrap_or_default();
        assert!(last.contains("`ingest`") && last.contains(&limit), "{message}: {last}");
        assert!(peak_kib < bound, "{message}: peak RSS {peak_kib} KiB, a harmless call's {harmless_kib} KiB");
    }
}

/// The cache file of `component` in `cache` (`<hash>-<compat>.cwasm`) and its stamp.
fn cache_files(cache: &Path) -> (PathBuf, PathBuf) {
    let cwasm = std::fs::read_dir(cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .unwrap();
    (cwasm.clone(), cwasm.with_extension("sha256"))
}

fn load_redact(cache: &Path, data: &Path) -> ComponentRunner {
    let redact = component("redact");
    ComponentRunner::load("redact", &redact, Limits::default(), Default::default(), data.into(), Some(cache)).unwrap()
}

/// Compiles the hostile component into its own cache dir under `root`: the
/// attacker's module, whose `describe` names the `ingest` hook (the marker:
/// redact has only `transform_tool_result`).
fn planted_module(root: &Path) -> (PathBuf, PathBuf) {
    let theirs = root.join("attacker-cache");
    let runner = ComponentRunner::load(
        "hostile",
        &component("hostile"),
        Limits::default(),
        Default::default(),
        root.join("kv"),
        Some(&theirs),
    )
    .unwrap();
    assert!(runner.hooks().contains(&HookName::Ingest));
    cache_files(&theirs)
}

/// The attacker replaces redact's cached `.cwasm` with a symlink to a
/// compiled module of their choosing (a file owned by the victim, with a
/// matching stamp beside it). Must hold: the symlink is not followed — the
/// planted module's behaviour (its `ingest` hook) never appears — and redact
/// is recompiled from its `.wasm`, replacing the symlink with a real file.
#[test]
fn a_cwasm_swapped_for_a_symlink_is_not_loaded() {
    let root = tempfile::tempdir().unwrap();
    let cache = root.path().join("cache");
    assert!(!load_redact(&cache, &root.path().join("kv")).from_cache());
    let (cwasm, stamp) = cache_files(&cache);
    let (their_cwasm, their_stamp) = planted_module(root.path());
    std::fs::remove_file(&cwasm).unwrap();
    std::os::unix::fs::symlink(&their_cwasm, &cwasm).unwrap();
    std::fs::copy(&their_stamp, &stamp).unwrap();

    let loaded = load_redact(&cache, &root.path().join("kv"));
    assert!(!loaded.from_cache(), "the symlinked module was loaded");
    assert_eq!(loaded.hooks().iter().copied().collect::<Vec<_>>(), [HookName::TransformToolResult]);
    let req = HookRequest::from_json(HookName::TransformToolResult, json!({"result": "AKIA0123456789ABCDEF"})).unwrap();
    assert_eq!(loaded.call_sync(&req).unwrap(), json!({"content": "[REDACTED]"}));
    assert!(!cwasm.symlink_metadata().unwrap().file_type().is_symlink(), "recompiled over the symlink");
    assert!(load_redact(&cache, &root.path().join("kv")).from_cache(), "the recompiled file is trusted");
}

/// The cache dir is group- or other-writable, so anyone may have swapped its
/// files: here the attacker moved their module (with its stamp, both regular
/// files of the victim) under redact's cache name. Must hold: nothing is
/// loaded from that dir (the planted `ingest` hook never appears; redact is
/// compiled from its `.wasm`), for mode 0777 and 0770 alike.
#[test]
fn a_group_or_other_writable_cache_dir_is_not_trusted() {
    use std::os::unix::fs::PermissionsExt;
    let root = tempfile::tempdir().unwrap();
    let cache = root.path().join("cache");
    assert!(!load_redact(&cache, &root.path().join("kv")).from_cache());
    let (cwasm, stamp) = cache_files(&cache);
    let (their_cwasm, their_stamp) = planted_module(root.path());
    std::fs::copy(&their_cwasm, &cwasm).unwrap();
    std::fs::copy(&their_stamp, &stamp).unwrap();
    for mode in [0o777, 0o770] {
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(mode)).unwrap();
        let loaded = load_redact(&cache, &root.path().join("kv"));
        assert!(!loaded.from_cache(), "loaded from a {mode:o} dir");
        assert_eq!(loaded.hooks().iter().copied().collect::<Vec<_>>(), [HookName::TransformToolResult]);
    }
    // The planted files were left alone (nothing is written there either),
    // and the check is what kept them out: in a 0755 dir they would load.
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o755)).unwrap();
    let trusted = load_redact(&cache, &root.path().join("kv"));
    assert!(trusted.from_cache() && trusted.hooks().contains(&HookName::Ingest), "the attack is real");
}

/// The guest opens a TCP connection and sends a UDP datagram to sockets
/// listening on 127.0.0.1 (through `wasi:sockets`). Must hold: both are
/// refused in the guest, and neither listener ever sees a connection or a
/// byte.
#[test]
fn guest_sockets_reach_nothing() {
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(std::time::Duration::from_millis(200))).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let runner = hostile(&dir.path().join("data"));
    let said = order(&runner, &format!("tcp:{}", tcp.local_addr().unwrap().port())).unwrap();
    assert!(said.starts_with("denied:"), "tcp: {said}");
    let said = order(&runner, &format!("udp:{}", udp.local_addr().unwrap().port())).unwrap();
    assert!(said.starts_with("denied:"), "udp: {said}");
    assert_eq!(tcp.accept().map(drop).unwrap_err().kind(), std::io::ErrorKind::WouldBlock, "a connection came in");
    let mut buf = [0u8; 64];
    assert!(udp.recv_from(&mut buf).is_err(), "a datagram came in");
}

/// The guest writes 1,000 lines (~90 KiB, more than the 64 KiB captured) to
/// stderr and then panics. Must hold: the call fails with a short error
/// (under 1.2 KiB) that ends with the panic's message, and none of the noise.
#[test]
fn a_panic_after_a_flood_of_stderr_is_reported_briefly() {
    let dir = tempfile::tempdir().unwrap();
    let err = order(&hostile(&dir.path().join("data")), "noisy-panic").unwrap_err();
    assert!(err.len() < 1200, "{} bytes: {err:.300}", err.len());
    assert!(err.contains("guest panic: ") && err.ends_with("the cause, after the noise"), "{err}");
    assert!(!err.contains("noise line"), "{err}");
}

/// A component rewrites its own plugin.toml after its first load so that
/// `[sandbox] dirs` maps a directory outside (here one holding a secret)
/// read-write into the guest, then takes a turn: its memory file would land
/// there. The grant recorded at the first load did not name that
/// directory, so it is left out with a warning: nothing is written outside,
/// and the memory stays inside the plugin's own directory.
#[test]
fn a_component_widening_its_dirs_through_plugin_toml_gets_nothing_new() {
    let p = crate::util::example("recall");
    let outside = p.root.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret"), "the secret\n").unwrap();
    let turn = json!({"agent_id": "a", "messages": [{"role": "user", "content": "My garden has tomatoes"}]});
    // First load: the grant is recorded from this manifest (its own dir only).
    p.hook("after_turn", &turn.to_string()).success();
    let manifest = std::fs::read_to_string(p.dir.join("plugin.toml")).unwrap().replace(
        "dirs = [{ host = \".\", guest = \"/data\", mode = \"rw\" }]",
        &format!("dirs = [{{ host = \"{}\", guest = \"/data\", mode = \"rw\" }}]", outside.display()),
    );
    assert!(manifest.contains("outside"), "the attack rewrote the manifest");
    std::fs::write(p.dir.join("plugin.toml"), manifest).unwrap();
    let a = p.hook("after_turn", &turn.to_string());
    let err = crate::util::stderr(&a);
    assert!(err.contains("outside the plugin's directory and not granted"), "the refusal is named: {err}");
    let names: Vec<_> = std::fs::read_dir(&outside).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, [std::ffi::OsString::from("secret")], "the guest wrote outside");
    assert_eq!(std::fs::read_to_string(outside.join("secret")).unwrap(), "the secret\n");
}
