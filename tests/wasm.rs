//! Wasm plugins on wasmtime (components and core modules): loading, describe,
//! typed calls through the same JSON replies as script plugins.

use ctxhost::protocol::{HookName, HookRequest};
use ctxhost::runner::ErrorKind;
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
    let (engine, warnings) = ctxhost::app::load_stack(&cx).unwrap();
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
        self.order_kind(order).map_err(|(_, text)| text)
    }

    /// [`Hostile::order`], a failure with its kind.
    fn order_kind(&self, order: &str) -> Result<String, (ErrorKind, String)> {
        let req = HookRequest::from_json(HookName::Ingest, json!({"agent_id": "a", "message": order})).unwrap();
        self.runner
            .call_sync(&req)
            .map(|v| v["memories"][0]["content"].as_str().unwrap_or_default().to_owned())
            .map_err(|e| (e.kind(), e.to_string()))
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
        let r = h.order_kind(order);
        assert!(started.elapsed() < std::time::Duration::from_secs(5), "{order} took {:?}", started.elapsed());
        r
    };
    let (kind, err) = timed("loop").unwrap_err();
    assert!(err.starts_with("out of fuel after 2000000"), "{err}");
    assert_eq!(kind, ErrorKind::OutOfFuel);
    let (kind, err) = timed("memory").unwrap_err();
    assert_eq!(
        (kind, err.as_str()),
        (ErrorKind::MemoryLimit, "memory limit of 32 MiB exceeded (`[sandbox] memory_mb`)")
    );
    let (kind, err) = timed("panic").unwrap_err();
    assert!(err.starts_with("guest panic: ") && err.contains("the hostile guest gave up on purpose"), "{err}");
    assert_eq!(kind, ErrorKind::GuestPanic);
    let (kind, err) = timed("recursion").unwrap_err();
    assert!(err.contains("stack overflow") && err.contains("recursion"), "{err}");
    assert_eq!(kind, ErrorKind::Crashed);
    let (kind, err) = timed("fail").unwrap_err();
    assert_eq!((kind, err.as_str()), (ErrorKind::Failed, "the plugin reported a failure: asked to fail"));
    // And the host still serves: the same runner answers a harmless call.
    assert_eq!(timed("read-granted").unwrap(), "allowed: \"granted content\"");
}

#[test]
fn the_deadline_stops_a_guest_with_fuel_to_spare() {
    let h = Hostile::new(Limits { fuel: u64::MAX / 2, timeout_ms: 300, ..small() });
    let started = std::time::Instant::now();
    let (kind, err) = h.order_kind("loop").unwrap_err();
    assert_eq!((kind, err.as_str()), (ErrorKind::Timeout, "Hook timed out after 300 ms"));
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
    assert_eq!(err, "error: out of fuel after 1000000 units (`[sandbox] fuel`)\n");

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
    assert!(err.lines().last().unwrap().starts_with("error: guest panic: "), "{err}");
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

// ---- Agent-loop components (world `agent-plugin`): the guard, the services probe ----

/// Points `<home>/cache/components` at one compile cache shared by these
/// tests (under the target dir; keyed by content hash), so each of their many
/// `ctxhost hook` processes does not compile the component again. Returns `home`.
fn with_shared_component_cache(home: &std::path::Path) -> std::path::PathBuf {
    let shared = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| crate::util::repo_root().join("target"))
        .join("test-component-cache");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::create_dir_all(home.join("cache")).unwrap();
    let link = home.join("cache/components");
    if !link.exists() {
        std::os::unix::fs::symlink(&shared, &link).unwrap();
    }
    home.to_owned()
}

/// `ctxhost --home <home> hook <dir> <hook>` with `request` on stdin.
fn hook_in(
    home: &std::path::Path,
    dir: &std::path::Path,
    hook: &str,
    request: &serde_json::Value,
) -> assert_cmd::assert::Assert {
    let home = with_shared_component_cache(home);
    crate::util::ctxhost()
        .arg("--home")
        .arg(home)
        .args(["hook", dir.to_str().unwrap(), hook])
        .write_stdin(request.to_string())
        .assert()
}

#[test]
fn the_guard_component_blocks_passes_and_redacts() {
    let p = crate::util::example("guard");
    let pre = |name: &str, args: serde_json::Value| {
        let a = hook_in(&p.home, &p.dir, "tool_call_pre", &json!({"name": name, "args": args, "agent_id": "a1"}));
        crate::util::reply(&a.success())
    };
    assert_eq!(
        pre("shell_exec", json!({"command": "sudo rm -rf / --no-preserve-root"})),
        json!({"action": "block", "reason": "guard: refusing a command containing `rm -rf`"})
    );
    assert_eq!(pre("shell_exec", json!({"command": "ls -la"})), json!({"action": "pass"}));
    assert_eq!(pre("file_write", json!({"command": "rm -rf /"})), json!({"action": "pass"}), "only shell_exec");
    assert_eq!(pre("shell_exec", json!({"cmd": "rm -rf /"})), json!({"action": "pass"}), "no args.command");
    assert_eq!(pre("shell_exec", json!({"command": ["rm -rf /"]})), json!({"action": "pass"}), "not a string");

    let write = |content: &str| {
        let request = json!({"type": "memory_write_pre", "content": content, "metadata": {"source": "chat"}});
        crate::util::reply(&hook_in(&p.home, &p.dir, "memory_write_pre", &request).success())
    };
    assert_eq!(
        write("Mail bob.smith+news@example.co.uk or alice@x.io; not me@localhost, a@b@c.com."),
        json!({"action": "replace", "value": "Mail [email] or [email]; not me@localhost, a@[email]."})
    );
    assert_eq!(write("no addresses here, just @mentions"), json!({"action": "pass"}));
}

#[test]
fn the_guard_reads_its_block_pattern_from_the_config_service() {
    let p = crate::util::example("guard");
    crate::util::write(
        &p.home.join("agent/plugins/guard/agent_config.json"),
        &json!({"BLOCK_PATTERN": "drop table"}).to_string(),
    );
    let pre = |command: &str| {
        let request = json!({"name": "shell_exec", "args": {"command": command}, "agent_id": "a1"});
        crate::util::reply(&hook_in(&p.home, &p.dir, "tool_call_pre", &request).success())
    };
    assert_eq!(
        pre("psql -c 'drop table users'"),
        json!({"action": "block", "reason": "guard: refusing a command containing `drop table`"})
    );
    assert_eq!(pre("rm -rf /tmp/x"), json!({"action": "pass"}), "the configured pattern replaces the default");
}

#[test]
fn an_agent_component_declares_its_hooks_and_config_through_describe_agent() {
    let p = crate::util::example("guard");
    let home = ctxhost::home::Home::resolve(
        ctxhost::home::HomeOverrides { home: Some(p.home.clone()), plugins_dir: None, config: None },
        &|_| None,
    );
    let config = ctxhost::config::HostConfig::default();
    let cx = ctxhost::plugin::LoadContext {
        home: &home,
        config: &config,
        host_env: &ctxhost::plugin::LoadContext::process_env,
    };
    let plugin = ctxhost::plugin::load_plugin(&p.dir, &cx).unwrap();
    assert_eq!(plugin.hooks.iter().copied().collect::<Vec<_>>(), [HookName::ToolCallPre, HookName::MemoryWritePre]);
    assert_eq!(plugin.agent.priority, None);
    let schema = serde_json::to_value(&plugin.agent.config).unwrap();
    assert_eq!(schema[0]["key"], "BLOCK_PATTERN");
    assert_eq!(schema[0]["type"], "str");
    assert_eq!(schema[0]["label"], "Blocked pattern");
    assert_eq!(schema[0]["default"], "rm -rf");
    assert_eq!(schema.as_array().unwrap().len(), 1);
}

/// The services probe as a plugin dir `<root>/plugins/services-probe`, with
/// `extra` appended to its manifest.
fn probe_plugin(root: &std::path::Path, extra: &str) -> std::path::PathBuf {
    let dir = root.join("plugins/services-probe");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(component("services_probe"), dir.join("probe.wasm")).unwrap();
    crate::util::write(
        &dir.join("plugin.toml"),
        &format!(
            "name = \"services-probe\"\nversion = \"0.1.0\"\nruntime = \"wasm\"\ncomponent = \"probe.wasm\"\n\
             [sandbox]\nfuel = 200_000_000\nmemory_mb = 32\n{extra}\n"
        ),
    );
    dir
}

/// A test home with the probe: each `calls` runs the given service calls in
/// one `ctxhost hook … communicate` process.
struct Probe {
    root: tempfile::TempDir,
    dir: std::path::PathBuf,
}

impl Probe {
    fn new() -> Probe {
        let root = tempfile::tempdir().unwrap();
        let dir = probe_plugin(root.path(), "");
        Probe { root, dir }
    }

    fn home(&self) -> std::path::PathBuf {
        with_shared_component_cache(&self.root.path().join("home"))
    }

    /// The results of `calls` (`[method, params]` pairs), made during a
    /// `communicate` call for `agent` (none: no `agent_id`).
    fn calls(&self, agent: Option<&str>, calls: &[(&str, serde_json::Value)]) -> Vec<serde_json::Value> {
        let calls: Vec<_> = calls.iter().map(|(m, p)| json!({"method": m, "params": p})).collect();
        let mut request = json!({"payload": {"calls": calls}});
        if let Some(agent) = agent {
            request["agent_id"] = json!(agent);
        }
        let reply = crate::util::reply(&hook_in(&self.home(), &self.dir, "communicate", &request).success());
        reply["results"].as_array().unwrap().clone()
    }
}

/// The `err` text of a result, failing the test on `ok`.
fn err_of(result: &serde_json::Value) -> String {
    result["err"].as_str().unwrap_or_else(|| panic!("expected an error, got {result}")).to_owned()
}

#[test]
fn the_config_service_through_component_imports() {
    let probe = Probe::new();
    let r = probe.calls(
        None,
        &[
            ("config.get", json!({"key": "LIMIT"})),
            ("config.get", json!({"key": "GREETING"})),
            ("config.get", json!({"key": "UNDECLARED", "default": {"fallback": true}})),
            ("config.set", json!({"key": "LIMIT", "value": "7"})),
            ("config.get", json!({"key": "LIMIT"})),
            ("config.set", json!({"key": "LIMIT", "value": "many"})),
            ("config.set", json!({"key": "LIMTI", "value": 1})),
            ("raw.config.set", json!({"key": "LIMIT", "value_json": "{not json"})),
            ("config.list", json!({})),
        ],
    );
    assert_eq!(r[0], json!({"ok": 3}), "the schema default");
    assert_eq!(r[1], json!({"ok": "hello"}));
    assert_eq!(r[2], json!({"ok": {"fallback": true}}), "the caller's default for an undeclared key");
    assert_eq!(r[3], json!({"ok": 7}), "\"7\" coerced for an int");
    assert_eq!(r[4], json!({"ok": 7}));
    let e = err_of(&r[5]);
    assert!(e.contains("LIMIT") && e.contains("many"), "{e}");
    let e = err_of(&r[6]);
    assert!(e.contains("config key `LIMTI` is not in the plugin's schema"), "names the key: {e}");
    let e = err_of(&r[7]);
    assert!(e.contains("value-json") && e.contains("not JSON"), "{e}");
    assert_eq!(r[8]["ok"]["values"], json!({"LIMIT": 7, "GREETING": "hello"}));
    assert_eq!(r[8]["ok"]["schema"][0]["key"], "LIMIT");
    let store = ctxhost::host::store::sqlite::SqliteStore::open(&probe.home().join("state.db")).unwrap();
    let stored = ctxhost::host::store::Store::config_values(&store, "services-probe").unwrap();
    assert_eq!(stored["LIMIT"], 7, "persisted: {stored:?}");
}

#[test]
fn the_vfs_service_through_component_imports() {
    let probe = Probe::new();
    let r = probe.calls(
        None,
        &[
            ("vfs.write", json!({"path": "/plugins/services-probe/notes/a.txt", "content": "alpha"})),
            ("vfs.write", json!({"path": "plugins\\services-probe\\.\\x\\..\\notes\\b.txt", "content": "beta"})),
            ("vfs.read", json!({"path": "/plugins/services-probe/notes/a.txt"})),
            ("vfs.list", json!({"path": "/plugins/services-probe/notes"})),
            ("vfs.read", json!({"path": "/plugins/services-probe/notes/missing.txt"})),
            ("vfs.read", json!({"path": "/plugins/services-probe/notes"})),
            ("vfs.write", json!({"path": "/plugins/other/x.txt", "content": "no"})),
            ("vfs.write", json!({"path": "/etc/passwd", "content": "no"})),
            ("vfs.write", json!({"path": "/plugins/services-probe/../../other/y.txt", "content": "no"})),
            ("vfs.delete", json!({"path": "/plugins/services-probe/notes/a.txt"})),
            ("vfs.delete", json!({"path": "/plugins/services-probe/notes/a.txt"})),
            ("vfs.read", json!({"path": "/plugins/services-probe/notes/a.txt"})),
            ("vfs.list", json!({"path": "/plugins"})),
        ],
    );
    assert_eq!(r[0], json!({"ok": "/plugins/services-probe/notes/a.txt"}));
    assert_eq!(r[1], json!({"ok": "/plugins/services-probe/notes/b.txt"}), "the normal form");
    assert_eq!(r[2], json!({"ok": "alpha"}));
    assert_eq!(r[3], json!({"ok": ["a.txt", "b.txt"]}));
    assert_eq!(r[4], json!({"ok": null}));
    assert_eq!(r[5], json!({"ok": null}), "a directory is not a file");
    for refused in &r[6..9] {
        let e = err_of(refused);
        assert!(e.contains("may only write below /plugins/services-probe"), "{e}");
    }
    assert_eq!(r[9], json!({"ok": true}));
    assert_eq!(r[10], json!({"ok": false}), "nothing left to delete");
    assert_eq!(r[11], json!({"ok": null}));
    assert_eq!(r[12], json!({"ok": ["services-probe"]}), "nothing was written outside its subtree");
}

#[test]
fn the_storage_service_keeps_global_and_per_agent_values_apart() {
    let probe = Probe::new();
    let r = probe.calls(
        Some("agent-1"),
        &[
            ("storage.set", json!({"scope": "global", "key": "k", "value": {"n": 1}})),
            ("storage.set", json!({"scope": "session", "key": "k", "value": "one's"})),
            ("storage.get", json!({"scope": "global", "key": "k"})),
            ("storage.get", json!({"scope": "session", "key": "k"})),
            ("storage.get", json!({"scope": "global", "key": "absent"})),
        ],
    );
    assert_eq!(
        &r[..],
        [
            json!({"ok": null}),
            json!({"ok": null}),
            json!({"ok": {"n": 1}}),
            json!({"ok": "one's"}),
            json!({"ok": null})
        ]
    );
    let r = probe.calls(
        Some("agent-2"),
        &[
            ("storage.get", json!({"scope": "session", "key": "k"})),
            ("storage.get", json!({"scope": "global", "key": "k"})),
            ("storage.delete", json!({"scope": "global", "key": "k"})),
            ("storage.delete", json!({"scope": "global", "key": "k"})),
        ],
    );
    assert_eq!(r[0], json!({"ok": null}), "another agent's session is its own");
    assert_eq!(r[1], json!({"ok": {"n": 1}}), "global is shared by agents");
    assert_eq!((&r[2], &r[3]), (&json!({"ok": true}), &json!({"ok": false})));
    let r = probe.calls(
        None,
        &[
            ("storage.get", json!({"scope": "session", "key": "k"})),
            ("storage.get", json!({"scope": "global", "key": "k"})),
        ],
    );
    assert!(err_of(&r[0]).contains("`session` scope needs an agent"), "{}", r[0]);
    assert_eq!(r[1], json!({"ok": null}));
    let r = probe.calls(Some("agent-1"), &[("storage.get", json!({"scope": "session", "key": "k"}))]);
    assert_eq!(r[0], json!({"ok": "one's"}), "agent-1's value survived the others' calls");
}

#[test]
fn the_trigger_service_creates_merges_and_deletes() {
    let probe = Probe::new();
    let trigger = json!({"id": "t1", "type": "interval", "interval_seconds": 60, "payload": {"a": 1, "b": 2}});
    let r = probe.calls(
        None,
        &[
            ("trigger.create", json!({"trigger": trigger})),
            ("trigger.get", json!({"id": "t1"})),
            ("trigger.update", json!({"id": "t1", "patch": {"payload": {"b": null, "c": 3}, "priority": 5}})),
            ("trigger.list", json!({})),
            ("trigger.get", json!({"id": "nope"})),
            ("trigger.create", json!({"trigger": "not an object"})),
        ],
    );
    assert_eq!(r[0], json!({"ok": "t1"}));
    let got = &r[1]["ok"];
    assert_eq!(
        (&got["id"], &got["plugin"], &got["payload"]),
        (&json!("t1"), &json!("services-probe"), &json!({"a": 1, "b": 2}))
    );
    let updated = &r[2]["ok"];
    assert_eq!(updated["payload"], json!({"a": 1, "c": 3}), "merged, not replaced: {updated}");
    assert_eq!((&updated["priority"], &updated["interval_seconds"]), (&json!(5), &json!(60)));
    assert_eq!(r[3]["ok"].as_array().unwrap().len(), 1);
    assert_eq!(r[3]["ok"][0]["payload"], json!({"a": 1, "c": 3}));
    assert_eq!(r[4], json!({"ok": null}));
    assert!(err_of(&r[5]).contains("must be a JSON object"), "{}", r[5]);
    let r = probe.calls(None, &[("trigger.delete", json!({"id": "t1"})), ("trigger.delete", json!({"id": "t1"}))]);
    assert_eq!((&r[0], &r[1]), (&json!({"ok": true}), &json!({"ok": false})));
}

#[test]
fn services_persist_across_ctxhost_processes() {
    let probe = Probe::new();
    let r = probe.calls(
        Some("a1"),
        &[
            ("config.set", json!({"key": "GREETING", "value": "bonjour"})),
            ("vfs.write", json!({"path": "/plugins/services-probe/kept.txt", "content": "still here"})),
            ("storage.set", json!({"scope": "session", "key": "s", "value": [1, 2]})),
            ("trigger.create", json!({"trigger": {"id": "later", "type": "event", "event_name": "wake"}})),
        ],
    );
    assert!(r.iter().all(|x| x.get("ok").is_some()), "{r:?}");
    let r = probe.calls(
        Some("a1"),
        &[
            ("config.get", json!({"key": "GREETING"})),
            ("vfs.read", json!({"path": "/plugins/services-probe/kept.txt"})),
            ("storage.get", json!({"scope": "session", "key": "s"})),
            ("trigger.get", json!({"id": "later"})),
        ],
    );
    assert_eq!(r[0], json!({"ok": "bonjour"}));
    assert_eq!(r[1], json!({"ok": "still here"}));
    assert_eq!(r[2], json!({"ok": [1, 2]}));
    assert_eq!(r[3]["ok"]["event_name"], "wake");
}

#[test]
fn agent_hook_replies_are_checked_and_not_implemented_is_pass() {
    let probe = Probe::new();
    let home = probe.home();
    let a = hook_in(&home, &probe.dir, "health_check", &json!({})).success();
    assert_eq!(crate::util::reply(&a), json!({"action": "pass"}), "not-implemented is a pass");
    let a = hook_in(&home, &probe.dir, "message_received", &json!({"text": "{\"text\":\"hi\"}", "origin": "user"}));
    assert_eq!(crate::util::reply(&a.success()), json!({"text": "hi"}), "the reply JSON as the plugin wrote it");
    let a = hook_in(&home, &probe.dir, "message_received", &json!({"text": "plain words", "origin": "user"})).failure();
    let err = crate::util::stderr(&a);
    assert!(err.contains("'services-probe' answered `message_received` with text that is not JSON"), "{err}");
    let a = hook_in(&home, &probe.dir, "tool_call_pre", &json!({"name": "x", "args": {}})).failure();
    assert_eq!(
        crate::util::stderr(&a),
        "error: plugin 'services-probe' has no `tool_call_pre` hook \
         (it declares: message_received, health_check, communicate)\n"
    );
}

#[test]
fn a_bad_describe_agent_is_a_load_error_naming_the_plugin() {
    for (describe, expected) in [
        ("{oops", "describe-agent reply is not JSON"),
        ("[1]", "must be a JSON object, not an array"),
        (r#"{"hooks":["ingest"]}"#, "lists `ingest`, a context hook"),
        (r#"{"hooks":["tool_call_pr"]}"#, "`tool_call_pr`, which is not an agent-loop hook"),
        (r#"{"hooks":[],"tools":[{"name":"t","parameters":7}]}"#, "tools[0].parameters"),
    ] {
        let root = tempfile::tempdir().unwrap();
        let env = format!("[sandbox.env]\nPROBE_DESCRIBE = '{describe}'\n");
        let dir = probe_plugin(root.path(), &env);
        let a = hook_in(&root.path().join("home"), &dir, "communicate", &json!({"payload": {}})).failure();
        let err = crate::util::stderr(&a);
        assert!(err.contains("plugin 'services-probe'") && err.contains(expected), "{describe}: {err}");
    }
}

#[test]
fn a_guest_looping_on_service_calls_still_dies_at_its_deadline() {
    let probe = Probe::new();
    let started = std::time::Instant::now();
    let a = crate::util::ctxhost()
        .arg("--home")
        .arg(probe.home())
        .args(["hook", probe.dir.to_str().unwrap(), "communicate", "--timeout-secs", "1"])
        .write_stdin(json!({"payload": {"spin": true}}).to_string())
        .assert()
        .failure();
    assert_eq!(crate::util::stderr(&a), "error: Hook timed out after 1000 ms\n");
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "{:?}", started.elapsed());
}

#[test]
fn context_only_components_still_load_and_refuse_agent_hooks() {
    let p = crate::util::example("recall");
    let turn = json!({"agent_id": "a", "messages": [{"role": "user", "content": "My garden has tomatoes"}]});
    assert_eq!(crate::util::reply(&hook_in(&p.home, &p.dir, "after_turn", &turn).success()), json!({"type": "ok"}));
    let a = hook_in(&p.home, &p.dir, "ingest", &json!({"agent_id": "a", "message": "the garden?"})).success();
    assert_eq!(crate::util::reply(&a)["memories"][0]["content"], "My garden has tomatoes");
    let a = hook_in(&p.home, &p.dir, "tool_call_pre", &json!({"name": "shell_exec", "args": {}})).failure();
    assert_eq!(
        crate::util::stderr(&a),
        "error: plugin 'recall' has no `tool_call_pre` hook (it declares: ingest, after_turn)\n"
    );
    // Called directly, past the declared-hook check: refused, naming the world it lacks.
    let runner = ComponentRunner::load(
        "redact",
        &component("redact"),
        Limits::default(),
        Default::default(),
        p.root.path().join("kv"),
        None,
    )
    .unwrap();
    assert!(!runner.is_agent_plugin() && runner.agent_decl().is_none());
    let req = HookRequest::from_json(HookName::ToolCallPre, json!({"name": "x", "args": {}})).unwrap();
    let err = runner.call_sync(&req).unwrap_err().to_string();
    assert!(err.contains("'redact' is a context-only component") && err.contains("agent-plugin"), "{err}");
}

/// Engine calls for the services: `trigger_append` waits a little before
/// tagging the trigger (so the service call has to wait on the runtime),
/// `read_symbolic` computes `<owner>:<path>`, or never answers for `/hang`.
struct SlowHost;

impl ctxhost::host::services::HostCalls for SlowHost {
    fn config_changed(&self, _plugin: &str, _change: ctxhost::host::config::Change) {}

    fn trigger_append(
        &self,
        _from: Option<&str>,
        mut trigger: serde_json::Map<String, serde_json::Value>,
    ) -> ctxhost::runner::BoxFuture<'_, Result<serde_json::Value, String>> {
        Box::pin(async move {
            tokio::time::sleep(std::time::Duration::from_millis(30)).await;
            trigger.insert("appended".into(), json!(true));
            Ok(serde_json::Value::Object(trigger))
        })
    }

    fn read_symbolic(&self, owner: &str, path: &str) -> ctxhost::runner::BoxFuture<'_, Result<String, String>> {
        let (owner, path) = (owner.to_owned(), path.to_owned());
        Box::pin(async move {
            if path.ends_with("/hang") {
                std::future::pending::<()>().await;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            Ok(format!("{owner}:{path}"))
        })
    }
}

#[test]
fn service_calls_that_wait_finish_on_the_runtime_within_the_deadline() {
    use ctxhost::host::services::{ConfigView, HostCalls, PluginServices, SharedServices};
    use ctxhost::runner::Runner;
    let root = tempfile::tempdir().unwrap();
    let shared = SharedServices::open(&ctxhost::home::Home::at(root.path())).unwrap();
    let host: std::sync::Arc<dyn HostCalls> = std::sync::Arc::new(SlowHost);
    shared.connect(std::sync::Arc::downgrade(&host));
    for node in ["/plugins/other/computed", "/plugins/other/hang"] {
        shared.vfs().write_symbolic(ctxhost::host::vfs::Writer::Plugin("other"), node, false).unwrap();
    }
    let limits = Limits { timeout_ms: 1_000, ..Limits::default() };
    let runner = ComponentRunner::load(
        "services-probe",
        &component("services_probe"),
        limits,
        Default::default(),
        root.path().join("kv"),
        None,
    )
    .unwrap();
    let handle = ctxhost::runner::wasm::component::ComponentHandle(std::sync::Arc::new(runner));
    let communicate = |calls: serde_json::Value| {
        HookRequest::from_json(HookName::Communicate, json!({"payload": {"calls": calls}, "agent_id": "a"})).unwrap()
    };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let options = ctxhost::runner::CallOptions::default();

    let without =
        rt.block_on(handle.call(&communicate(json!([{"method": "config.get", "params": {"key": "LIMIT"}}])), &options));
    assert_eq!(without.unwrap(), json!({"results": [{"err": "no host services are attached to this plugin"}]}));

    let schema =
        ctxhost::manifest::AgentDecl::from_json(&json!({"config": [{"key": "LIMIT", "type": "int", "default": 3}]}))
            .unwrap()
            .config;
    let services = PluginServices::open(shared.clone(), "services-probe", schema, ConfigView::default()).unwrap();
    handle.attach_services(std::sync::Arc::new(services));
    // On the engine's multi-thread runtime and on `ctxhost hook`'s current-thread one.
    let current = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    for (i, rt) in [&rt, &current].into_iter().enumerate() {
        let id = format!("w{i}");
        let calls = json!([
            {"method": "config.get", "params": {"key": "LIMIT"}},
            {"method": "trigger.create", "params": {"trigger": {"id": id, "type": "event", "event_name": "e"}}},
            {"method": "trigger.get", "params": {"id": id}},
            {"method": "vfs.read", "params": {"path": "/plugins/other/computed"}},
        ]);
        let reply = rt.block_on(handle.call(&communicate(calls), &options)).unwrap();
        let r = &reply["results"];
        assert_eq!(r[0], json!({"ok": 3}));
        assert_eq!(r[1], json!({"ok": id}));
        assert_eq!(r[2]["ok"]["appended"], true, "the trigger_append chain ran before it was stored: {reply}");
        assert_eq!(r[3], json!({"ok": "other:/plugins/other/computed"}), "computed by its owner");

        let started = std::time::Instant::now();
        let hang = communicate(json!([{"method": "vfs.read", "params": {"path": "/plugins/other/hang"}}]));
        // The service call gives up at the deadline; the guest then either
        // finishes with that error or is stopped by its own deadline.
        match rt.block_on(handle.call(&hang, &options)) {
            Ok(reply) => assert!(err_of(&reply["results"][0]).contains("outlived the hook's deadline"), "{reply}"),
            Err(e) => {
                assert_eq!((e.kind(), e.to_string()), (ErrorKind::Timeout, "Hook timed out after 1000 ms".into()))
            }
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(3), "{:?}", started.elapsed());
    }
}
