//! Wasm plugins on wasmtime (components and core modules): loading, describe,
//! typed calls through the same JSON replies as script plugins.

use ctxhost::protocol::{HookName, HookRequest};
use ctxhost::runner::wasm::component::{ComponentRunner, Limits};
use serde_json::json;

use crate::util::examples::component;

fn redact() -> ComponentRunner {
    let data = tempfile::tempdir().unwrap();
    ComponentRunner::load(
        "redact",
        &component("redact"),
        Limits::default(),
        Default::default(),
        data.path().to_owned(),
        None,
    )
    .unwrap()
}

#[test]
fn describe_lists_the_implemented_hooks() {
    assert_eq!(redact().hooks().iter().copied().collect::<Vec<_>>(), [HookName::TransformToolResult]);
}

#[test]
fn the_redaction_component_rewrites_secrets_and_leaves_clean_text_alone() {
    let r = redact();
    let call = |result: &str| {
        let req = HookRequest::from_json(HookName::TransformToolResult, json!({"tool_name": "env", "result": result}))
            .unwrap();
        r.call_sync(&req).unwrap()
    };
    assert_eq!(
        call("OPENAI_API_KEY=sk-abcdefghijklmnopqrstuvwxyz123456 and ghp_0123456789abcdefghijklmnopqrstuvwxyz!"),
        json!({"content": "OPENAI_API_KEY=[REDACTED] and [REDACTED]!"})
    );
    assert_eq!(call("nothing secret, sk-short"), json!({}), "no change is an empty reply");
}

#[test]
fn a_hook_the_component_does_not_implement_is_no_opinion() {
    let req = HookRequest::from_json(HookName::Ingest, json!({"agent_id": "a", "message": "m"})).unwrap();
    assert_eq!(redact().call_sync(&req).unwrap(), json!({"memories": []}));
}

#[test]
fn a_core_module_or_garbage_is_refused_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("x.wasm");
    std::fs::write(&file, b"\0asm\x01\0\0\0").unwrap();
    let err = ComponentRunner::load("x", &file, Limits::default(), Default::default(), dir.path().to_owned(), None)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("not a WebAssembly component"), "{err}");
}

/// A plugin directory holding the `redact` component.
fn redact_plugin(root: &std::path::Path, extra: &str) -> std::path::PathBuf {
    let dir = root.join("plugins/redact");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(component("redact"), dir.join("redact.wasm")).unwrap();
    std::fs::write(
        dir.join("plugin.toml"),
        format!("name = \"redact\"\nversion = \"0.1.0\"\nruntime = \"wasm\"\ncomponent = \"redact.wasm\"\n{extra}\n"),
    )
    .unwrap();
    dir
}

#[test]
fn ctxhost_hook_runs_a_component_like_a_script() {
    let root = tempfile::tempdir().unwrap();
    let dir = redact_plugin(root.path(), "[sandbox]\nfuel = 50000000\nmemory_mb = 32\n");
    let a = crate::util::ctxhost()
        .arg("--home")
        .arg(root.path().join("home"))
        .args(["hook", dir.to_str().unwrap(), "transform_tool_result"])
        .write_stdin(r#"{"tool_name":"env","result":"token: xoxb-1234567890-abcdef"}"#)
        .assert()
        .success();
    assert_eq!(crate::util::reply(&a), json!({"content": "token: [REDACTED]"}));
    let a = crate::util::ctxhost()
        .arg("--home")
        .arg(root.path().join("home"))
        .args(["hook", dir.to_str().unwrap(), "ingest"])
        .write_stdin("{}")
        .assert()
        .failure();
    assert_eq!(
        crate::util::stderr(&a),
        "error: plugin 'redact' has no `ingest` hook (it declares: transform_tool_result)\n"
    );
}

#[test]
fn a_component_takes_part_in_a_stack_with_script_plugins() {
    use ctxhost::engine::ContextEngine;
    let root = tempfile::tempdir().unwrap();
    redact_plugin(root.path(), "");
    let shout = root.path().join("plugins/shout");
    crate::util::write(
        &shout.join("plugin.toml"),
        "name = \"shout\"\nversion = \"1\"\n[hooks]\nruntime = \"bash\"\ntransform_tool_result = \"t.sh\"\n",
    );
    crate::util::write(&shout.join("t.sh"), "echo '{\"content\":\"SHOUTED\"}'\n");
    let home = ctxhost::home::Home::resolve(
        ctxhost::home::HomeOverrides {
            home: Some(root.path().join("home")),
            plugins_dir: Some(root.path().join("plugins")),
            config: None,
        },
        &|_| None,
    );
    crate::util::write(home.config_file(), "[context_engine]\nplugin_stack = [\"redact\", \"shout\"]\n");
    let (config, _) = ctxhost::config::HostConfig::load(home.config_file()).unwrap();
    let cx = ctxhost::plugin::LoadContext {
        home: &home,
        config: &config,
        host_env: &ctxhost::plugin::LoadContext::process_env,
    };
    let (engine, warnings) = ctxhost::engine::stack::load_stack(&cx).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let secret = ctxhost::protocol::TransformToolResultRequest::new(
        "a",
        "env",
        "t1",
        json!({}),
        "key sk-abcdefghijklmnopqrstuvwxyz",
        false,
    );
    assert_eq!(
        rt.block_on(engine.transform_tool_result(&secret)).unwrap(),
        "key [REDACTED]",
        "the component's rewrite wins"
    );
    let clean = ctxhost::protocol::TransformToolResultRequest::new("a", "env", "t2", json!({}), "nothing here", false);
    assert_eq!(
        rt.block_on(engine.transform_tool_result(&clean)).unwrap(),
        "SHOUTED",
        "no change moves on to the next layer"
    );
    assert_eq!(engine.metrics().by_plugin()["redact"]["transform_tool_result"].calls, 2);
}

/// The hostile component with a read-only `/data` and a writable `/scratch`.
struct Hostile {
    root: tempfile::TempDir,
    runner: ComponentRunner,
}

impl Hostile {
    fn new(limits: Limits) -> Hostile {
        let root = tempfile::tempdir().unwrap();
        let data = root.path().join("data");
        let scratch = root.path().join("scratch");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::create_dir_all(&scratch).unwrap();
        std::fs::write(data.join("hello.txt"), "granted content").unwrap();
        let limits = Limits {
            dirs: vec![
                ctxhost::manifest::DirGrant { host: data, guest: "/data".into(), mode: ctxhost::manifest::DirMode::Ro },
                ctxhost::manifest::DirGrant {
                    host: scratch,
                    guest: "/scratch".into(),
                    mode: ctxhost::manifest::DirMode::Rw,
                },
            ],
            env: [("GREETING".to_owned(), "hi".to_owned())].into(),
            ..limits
        };
        let runner = ComponentRunner::load(
            "hostile",
            &component("hostile"),
            limits,
            Default::default(),
            root.path().join("kv"),
            None,
        )
        .unwrap();
        Hostile { root, runner }
    }

    fn order(&self, order: &str) -> Result<String, String> {
        let req = HookRequest::from_json(HookName::Ingest, json!({"agent_id": "a", "message": order})).unwrap();
        self.runner
            .call_sync(&req)
            .map(|v| v["memories"][0]["content"].as_str().unwrap_or_default().to_owned())
            .map_err(|e| e.to_string())
    }
}

fn small() -> Limits {
    Limits { fuel: 200_000_000, timeout_ms: 2_000, memory_mb: 32, ..Limits::default() }
}

#[test]
fn hostile_guests_fail_with_their_own_clear_error_in_bounded_time() {
    let h = Hostile::new(small());
    let timed = |order: &str| {
        let started = std::time::Instant::now();
        let r = h.order(order);
        assert!(started.elapsed() < std::time::Duration::from_secs(5), "{order} took {:?}", started.elapsed());
        r
    };
    let err = timed("loop").unwrap_err();
    assert!(err.starts_with("component plugin out of fuel after 2000000"), "{err}");
    let err = timed("memory").unwrap_err();
    assert_eq!(err, "component plugin memory limit of 32 MiB exceeded");
    let err = timed("panic").unwrap_err();
    assert!(err.contains("guest panic") && err.contains("the hostile guest gave up on purpose"), "{err}");
    let err = timed("recursion").unwrap_err();
    assert!(err.contains("stack overflow") && err.contains("recursion"), "{err}");
    let err = timed("fail").unwrap_err();
    assert_eq!(err, "component plugin the plugin failed: asked to fail");
    // And the host still serves: the same runner answers a harmless call.
    assert_eq!(timed("read-granted").unwrap(), "allowed: \"granted content\"");
}

#[test]
fn the_deadline_stops_a_guest_with_fuel_to_spare() {
    let h = Hostile::new(Limits { fuel: u64::MAX / 2, timeout_ms: 300, ..small() });
    let started = std::time::Instant::now();
    let err = h.order("loop").unwrap_err();
    assert_eq!(err, "component plugin deadline of 300 ms exceeded");
    assert!(started.elapsed() < std::time::Duration::from_secs(2), "{:?}", started.elapsed());
}

#[test]
fn nothing_outside_the_granted_dirs_is_read_or_written() {
    let h = Hostile::new(small());
    let passwd = h.order("read-passwd").unwrap();
    assert!(passwd.starts_with("denied:") && !passwd.contains("root:"), "{passwd}");
    let escape = h.order("escape").unwrap();
    assert!(escape.starts_with("denied:") && !escape.contains("root:"), "{escape}");
    assert!(h.order("write-ro").unwrap().starts_with("denied:"));
    assert!(!h.root.path().join("data/planted.txt").exists(), "a read-only grant was written");
    assert_eq!(h.order("write-rw").unwrap(), "allowed: ()");
    assert_eq!(std::fs::read_to_string(h.root.path().join("scratch/written.txt")).unwrap(), "ok");
    assert!(h.order("network").unwrap().starts_with("denied:"));
    assert_eq!(h.order("env").unwrap(), "[(\"GREETING\", \"hi\")]", "only the declared environment");
}

#[test]
fn storage_keys_cannot_name_a_path() {
    let h = Hostile::new(small());
    assert_eq!(h.order("storage").unwrap(), "Ok(()) Some(\"kept\")");
    let kv = h.root.path().join("kv");
    let files: Vec<String> =
        std::fs::read_dir(&kv).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(files, [format!("kv-{}", hex::encode("../../outside/planted"))]);
    assert!(!h.root.path().join("outside").exists() && !kv.join("../../outside").exists());
}

#[test]
fn compiled_code_is_cached_and_only_trusted_cache_files_are_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let load = || {
        let data = dir.path().join("kv");
        ComponentRunner::load("redact", &component("redact"), Limits::default(), Default::default(), data, Some(&cache))
            .unwrap()
    };
    assert!(!load().from_cache(), "the first load compiles");
    let warm = load();
    assert!(warm.from_cache(), "the second load uses the .cwasm");
    let req = HookRequest::from_json(HookName::TransformToolResult, json!({"result": "AKIA0123456789ABCDEF"})).unwrap();
    assert_eq!(warm.call_sync(&req).unwrap(), json!({"content": "[REDACTED]"}));

    // A .cwasm changed behind the host's back is not loaded, but recompiled over.
    let cwasm = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .unwrap();
    let mut code = std::fs::read(&cwasm).unwrap();
    let last = code.len() - 1;
    code[last] ^= 0xff;
    std::fs::write(&cwasm, &code).unwrap();
    assert!(!load().from_cache());
    assert!(load().from_cache(), "the recompiled code is trusted again");

    // Nor is one that others may write.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&cwasm, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert!(!load().from_cache());
}

/// A LibreFang-style core-module plugin whose `ingest` is `wat` (WAT text is
/// accepted where a `.wasm` is expected).
fn core_plugin(wat: &str, sandbox: &str) -> crate::util::TestPlugin {
    let manifest = format!(
        "name = \"core\"\nversion = \"1\"\n[hooks]\nruntime = \"wasm\"\ningest = \"hooks/ingest.wasm\"\n{sandbox}\n"
    );
    crate::util::TestPlugin::new("core", &[("plugin.toml", &manifest), ("hooks/ingest.wasm", wat)])
}

const BUMP_ALLOC: &str = r#"
  (memory (export "memory") 2)
  (global $next (mut i32) (i32.const 1024))
  (func (export "alloc") (param $n i32) (result i32)
    (local $p i32)
    (local.set $p (global.get $next))
    (global.set $next (i32.add (global.get $next) (local.get $n)))
    (local.get $p))
"#;

#[test]
fn librefang_core_module_hooks_run_unmodified() {
    let wat = format!(
        r#"(module
  (import "librefang" "host_log" (func $log (param i32 i32 i32)))
  (import "librefang" "host_call" (func $call (param i32 i32) (result i64)))
  {BUMP_ALLOC}
  (data (i32.const 16) "{{\"memories\":[{{\"content\":\"from core\"}}]}}")
  (data (i32.const 128) "{{\"method\":\"kv_get\",\"params\":{{}}}}")
  (func (export "execute") (param $ptr i32) (param $len i32) (result i64)
    (call $log (i32.const 2) (local.get $ptr) (local.get $len))
    (drop (call $call (i32.const 128) (i32.const 31)))
    (i64.or (i64.shl (i64.const 16) (i64.const 32)) (i64.const 38))))"#
    );
    let p = core_plugin(&wat, "");
    let a = p.hook("ingest", r#"{"agent_id":"a","message":"hi"}"#).success();
    assert_eq!(crate::util::reply(&a), json!({"memories": [{"content": "from core"}]}));
    let log = crate::util::stderr(&a);
    assert!(
        log.contains(r#"{"type":"ingest","agent_id":"a","message":"hi","peer_id":null}"#),
        "the request was logged: {log}"
    );
}

#[test]
fn core_modules_are_bounded_and_checked() {
    let looping = format!(
        r#"(module {BUMP_ALLOC}
  (func (export "execute") (param i32 i32) (result i64) (loop $l (br $l)) (i64.const 0)))"#
    );
    let p = core_plugin(&looping, "[sandbox]\nfuel = 1000000\n");
    let err = crate::util::stderr(&p.hook("ingest", "{}").failure());
    assert_eq!(err, "error: component plugin out of fuel after 1000000 units\n");

    let foreign = format!(
        r#"(module (import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32))) {BUMP_ALLOC}
  (func (export "execute") (param i32 i32) (result i64) (i64.const 0)))"#
    );
    let p = core_plugin(&foreign, "");
    let err = crate::util::stderr(&p.hook("ingest", "{}").failure());
    assert!(err.contains("imports `wasi_snapshot_preview1.fd_write`, which is not allowed"), "{err}");
}

#[test]
fn the_budget_component_assembles_within_the_window() {
    let data = tempfile::tempdir().unwrap();
    let budget = ComponentRunner::load(
        "budget",
        &component("budget"),
        Limits::default(),
        Default::default(),
        data.path().to_owned(),
        None,
    )
    .unwrap();
    let text = |role: &str, t: &str| json!({"role": role, "content": t});
    let request = HookRequest::from_json(
        HookName::Assemble,
        json!({
            "agent_id": "a",
            "system_prompt": "",
            "context_window_tokens": 30,
            "messages": [
                {"role": "system", "content": "rules", "pinned": true},
                text("user", &"old ".repeat(40)),
                text("assistant", "short answer"),
                text("user", "latest question"),
            ],
        }),
    )
    .unwrap();
    let reply = budget.call_sync(&request).unwrap();
    let contents: Vec<&str> =
        reply["messages"].as_array().unwrap().iter().map(|m| m["content"].as_str().unwrap()).collect();
    assert_eq!(contents, ["rules", "short answer", "latest question"], "the oldest, longest message went");
}

/// A component from WAT text, written to `x.wasm` in `dir`.
fn wat_component(dir: &std::path::Path, wat: &str) -> std::path::PathBuf {
    let file = dir.join("x.wasm");
    std::fs::write(&file, wat::parse_str(wat).unwrap()).unwrap();
    file
}

#[test]
fn a_component_for_another_world_version_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let file = wat_component(dir.path(), r#"(component (import "ctxhost:plugin/host@0.2.0" (instance)))"#);
    let err = ComponentRunner::load("x", &file, Limits::default(), Default::default(), dir.path().to_owned(), None)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.ends_with("built for ctxhost:plugin@0.2.0, but this host implements ctxhost:plugin@0.1.0; rebuild it against this host's wit/ctxhost.wit"),
        "{err}"
    );
}

#[test]
fn an_import_outside_the_policy_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let file = wat_component(
        dir.path(),
        r#"(component (import "wasi:http/outgoing-handler@0.2.0" (instance (export "handle" (func)))))"#,
    );
    let err = ComponentRunner::load("x", &file, Limits::default(), Default::default(), dir.path().to_owned(), None)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("imports something ctxhost does not provide"), "{err}");
    assert!(err.contains("wasi:http/outgoing-handler@0.2.0"), "the import is named: {err}");
}

#[test]
fn guest_output_goes_to_the_log_and_a_panic_fails_the_call() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("plugins/hostile");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(component("hostile"), dir.join("hostile.wasm")).unwrap();
    std::fs::write(
        dir.join("plugin.toml"),
        "name = \"hostile\"\nversion = \"1\"\nruntime = \"wasm\"\ncomponent = \"hostile.wasm\"\n",
    )
    .unwrap();
    let a = crate::util::ctxhost()
        .arg("--home")
        .arg(root.path().join("home"))
        .args(["hook", dir.to_str().unwrap(), "ingest"])
        .write_stdin(r#"{"message":"panic"}"#)
        .assert()
        .failure();
    let err = crate::util::stderr(&a);
    let logged = err.lines().filter(|l| l.contains("plugin_stderr") && l.contains("stream=\"stderr\"")).count();
    assert!(logged >= 1, "the guest's stderr reaches the log: {err}");
    assert!(err.lines().last().unwrap().starts_with("error: component plugin guest panic: "), "{err}");
}

#[test]
fn doctor_loads_a_component_plugin() {
    let root = tempfile::tempdir().unwrap();
    redact_plugin(root.path(), "");
    let a = crate::util::ctxhost()
        .arg("--home")
        .arg(root.path().join("home"))
        .args(["--plugins-dir", root.path().join("plugins").to_str().unwrap(), "doctor", "--json"])
        .assert()
        .success();
    let report: serde_json::Value = serde_json::from_slice(&a.get_output().stdout).unwrap();
    let p = &report["plugins"][0];
    assert_eq!(
        (&p["name"], &p["runtime"], &p["runtime_available"], &p["hooks_valid"]),
        (&json!("redact"), &json!("wasm"), &json!(true), &json!(true))
    );
}
