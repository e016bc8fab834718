//! `worker_protocol = "jsonrpc"` (agent-hooks.md, "How script plugins reach
//! the services"): the framing of a hook call, a worker calling the host
//! services mid-hook through the python and node clients of
//! `guest-examples/rpc-clients`, service errors, lines that are skipped
//! (junk, a response to another id), an `error` answer that fails the call
//! but keeps the worker, a worker calling services forever that still times
//! out, two workers using the services at once, and the guard examples
//! (python worker, node one-shot) through `ctxhost hook`.
//!
//! Raw workers (no client) are small python scripts, so each test controls
//! exactly which lines go out. Plugin names are unique per test.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ctxhost::config::HostConfig;
use ctxhost::home::Home;
use ctxhost::host::services::SharedServices;
use ctxhost::host::vfs::Read;
use ctxhost::plugin::{LoadContext, LoadedPlugin, load_plugin};
use ctxhost::protocol::{HookName, HookRequest};
use ctxhost::runner::{CallOptions, HookError};
use serde_json::{Value, json};

use super::{eventually, rt};
use crate::util::procs::{pid_with_token, pids_with_arg};
use crate::util::{TestPlugin, ctxhost, example, is_dead, repo_root, require_program, write};

/// A python `jsonrpc` worker plugin: `worker` is `hooks/worker.py` (the
/// python client sits next to it), serving `hooks`.
fn python_plugin(name: &str, worker: &str, hooks: &[&str], settings: &str) -> TestPlugin {
    require_program("python3", "python3");
    rpc_plugin(name, "python", "worker.py", worker, "ctxhost_rpc.py", hooks, settings)
}

fn node_plugin(name: &str, worker: &str, hooks: &[&str], settings: &str) -> TestPlugin {
    require_program("node", "nodejs");
    rpc_plugin(name, "node", "worker.js", worker, "ctxhost_rpc.js", hooks, settings)
}

fn rpc_plugin(
    name: &str,
    runtime: &str,
    script: &str,
    body: &str,
    client: &str,
    hooks: &[&str],
    settings: &str,
) -> TestPlugin {
    let hook_lines: String = hooks.iter().map(|h| format!("{h} = \"hooks/{script}\"\n")).collect();
    let manifest = format!(
        "name = \"{name}\"\nversion = \"0.1.0\"\n[hooks]\nruntime = \"{runtime}\"\npersistent_subprocess = true\n\
         worker_protocol = \"jsonrpc\"\n{settings}\n{hook_lines}\n\
         [agent_config]\nLIMIT = {{ type = \"int\", label = \"Limit\", default = 3 }}\n"
    );
    let client_text = std::fs::read_to_string(repo_root().join("guest-examples/rpc-clients").join(client)).unwrap();
    TestPlugin::new(
        name,
        &[("plugin.toml", &manifest), (&format!("hooks/{script}"), body), (&format!("hooks/{client}"), &client_text)],
    )
}

/// The plugin loaded as the engine loads it, with its services attached
/// (`services`) or not.
struct Loaded {
    plugin: LoadedPlugin,
    shared: Option<Arc<SharedServices>>,
    home: Home,
}

fn load(p: &TestPlugin, services: bool) -> Loaded {
    let home = Home::at(&p.home);
    let config = HostConfig::default();
    let cx = LoadContext { home: &home, config: &config, host_env: &LoadContext::process_env };
    let plugin = load_plugin(&p.dir, &cx).unwrap_or_else(|e| panic!("load {}: {e}", p.dir.display()));
    let shared = services.then(|| {
        let shared = SharedServices::open(&home).unwrap();
        ctxhost::plugin::attach_services(&plugin, &shared, &home).unwrap();
        shared
    });
    Loaded { plugin, shared, home }
}

impl Loaded {
    fn call(&self, rt: &tokio::runtime::Runtime, hook: HookName, body: Value) -> Result<Value, HookError> {
        let request = HookRequest::from_json(hook, body).unwrap();
        rt.block_on(self.plugin.runner.call(&request, &CallOptions::default()))
    }
}

fn tool_call(args: Value) -> Value {
    json!({"name": "probe", "args": args, "agent_id": "agent-1"})
}

/// The token of the worker that answered.
fn token_of(reply: &Value) -> String {
    reply["worker"].as_str().unwrap_or_else(|| panic!("no worker token in {reply}")).to_owned()
}

/// The first lines of a python worker: it re-executes itself once with a
/// fresh token as its last argument (`TOKEN`). The token names the process
/// in its replies and in the host's `/proc` (its pid is 1 of its own pid
/// namespace, the same for every worker).
macro_rules! py_token {
    () => {
        r#"
import os, sys, uuid
if not sys.argv[-1].startswith("worker-"):
    argv = getattr(sys, "orig_argv", [sys.executable] + sys.argv)
    os.execv(sys.executable, argv + ["worker-" + str(uuid.uuid4())])
TOKEN = sys.argv[-1]
"#
    };
}

// --- raw workers: the framing and the reading rule ----------------------------

/// Answers every request with what it saw (and its token); `mode` in the
/// params' args first writes lines the host must skip.
const ECHO: &str = concat!(
    py_token!(),
    r#"
import json, sys
for line in sys.stdin:
    req = json.loads(line)
    mode = ((req.get("params") or {}).get("args") or {}).get("mode")
    out = sys.stdout
    if mode == "junk":
        out.write("debug: this line is not json\n")
        out.write('{"note": "json, but not json-rpc"}\n')
        out.write("[1, 2, 3]\n\n")
        out.write('{"jsonrpc": "2.0", "method": 7}\n')
    if mode == "wrong-id":
        out.write(json.dumps({"jsonrpc": "2.0", "id": 999999, "result": {"stale": True}}) + "\n")
        out.write(json.dumps({"jsonrpc": "2.0", "id": str(req["id"]), "result": {"stale": "string id"}}) + "\n")
        out.write(json.dumps({"jsonrpc": "2.0", "id": 999998, "error": {"code": 1, "message": "stale"}}) + "\n")
    out.write(json.dumps({"jsonrpc": "2.0", "id": req["id"], "result": {"worker": TOKEN, "seen": req}}) + "\n")
    out.flush()
"#
);

#[test]
fn a_hook_call_is_a_request_with_id_method_and_the_one_shot_params() {
    let p = python_plugin("rpc-frame", ECHO, &["tool_call_pre", "ingest", "read_symbolic"], "");
    let rt = rt();
    let loaded = load(&p, true);
    let body = tool_call(json!({"command": "line one\nline two", "café": "☕"}));
    let request = HookRequest::from_json(HookName::ToolCallPre, body.clone()).unwrap();
    let one_shot: Value = serde_json::from_slice(&request.to_json_line()).unwrap();

    let first = loaded.call(&rt, HookName::ToolCallPre, body.clone()).unwrap();
    let seen = &first["seen"];
    assert_eq!(seen["jsonrpc"], "2.0");
    assert_eq!(seen["method"], "hook/tool_call_pre");
    assert_eq!(seen["params"], one_shot, "the params are exactly what a one-shot script reads");
    assert_eq!(seen["params"]["type"], "tool_call_pre");
    let first_id = seen["id"].as_u64().expect("a numeric id");

    let second = loaded.call(&rt, HookName::ToolCallPre, body).unwrap();
    assert_eq!(token_of(&second), token_of(&first), "the same worker");
    assert!(second["seen"]["id"].as_u64().unwrap() > first_id, "a new id per call: {second}");

    let ingest = json!({"agent_id": "a", "message": "hello", "peer_id": null});
    let r = loaded.call(&rt, HookName::Ingest, ingest).unwrap();
    assert_eq!(r["seen"]["method"], "hook/ingest");
    assert_eq!(r["seen"]["params"], json!({"type": "ingest", "agent_id": "a", "message": "hello", "peer_id": null}));
    let r = loaded.call(&rt, HookName::ReadSymbolic, json!({"path": "/plugins/rpc-frame/x"})).unwrap();
    assert_eq!(r["seen"]["method"], "vfs/read_symbolic");
    assert_eq!(r["seen"]["params"]["path"], "/plugins/rpc-frame/x");
}

#[test]
fn junk_lines_before_the_response_are_skipped() {
    let p = python_plugin("rpc-junk", ECHO, &["tool_call_pre"], "");
    let rt = rt();
    let loaded = load(&p, true);
    let first = loaded.call(&rt, HookName::ToolCallPre, tool_call(json!({"mode": "junk"}))).unwrap();
    assert_eq!(first["seen"]["method"], "hook/tool_call_pre");
    let second = loaded.call(&rt, HookName::ToolCallPre, tool_call(json!({"mode": "junk"}))).unwrap();
    assert_eq!(token_of(&second), token_of(&first), "junk is never fatal: the same worker");
}

#[test]
fn a_response_to_another_id_is_skipped() {
    let p = python_plugin("rpc-wrong-id", ECHO, &["tool_call_pre"], "");
    let rt = rt();
    let loaded = load(&p, true);
    let r = loaded.call(&rt, HookName::ToolCallPre, tool_call(json!({"mode": "wrong-id"}))).unwrap();
    assert!(r.get("stale").is_none() && r["seen"]["method"] == "hook/tool_call_pre", "{r}");
    let again = loaded.call(&rt, HookName::ToolCallPre, tool_call(json!({"mode": "wrong-id"}))).unwrap();
    assert_eq!(token_of(&again), token_of(&r));
}

/// Calls `config.list` forever instead of answering; appends its token to
/// `tokens` and a line to `calls` per answered service call.
const SERVICES_FOREVER: &str = concat!(
    py_token!(),
    r#"
import json, sys
with open("tokens", "a") as f:
    f.write(TOKEN + "\n")
for line in sys.stdin:
    n = 0
    while True:
        n += 1
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": "w%d" % n, "method": "config.list"}) + "\n")
        sys.stdout.flush()
        answer = json.loads(sys.stdin.readline())
        if n == 5:
            with open("calls", "a") as f:
                f.write("answered %s\n" % json.dumps(answer["result"]["values"]))
"#
);

#[test]
fn a_worker_calling_services_forever_times_out_and_is_killed() {
    let p = python_plugin("rpc-forever", SERVICES_FOREVER, &["tool_call_pre"], "hook_timeout_secs = 1");
    let rt = rt();
    let loaded = load(&p, true);
    let started = Instant::now();
    let err = loaded.call(&rt, HookName::ToolCallPre, tool_call(json!({}))).unwrap_err();
    assert!(matches!(err, HookError::Timeout { secs: 1 }), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "bounded by the deadline (and one retry): {:?}",
        started.elapsed()
    );
    let calls = std::fs::read_to_string(p.dir.join("calls")).unwrap_or_default();
    assert!(calls.contains(r#"answered {"LIMIT": 3}"#), "its service calls were answered meanwhile: {calls:?}");
    let text = std::fs::read_to_string(p.dir.join("tokens")).unwrap();
    let tokens: BTreeSet<&str> = text.lines().collect();
    assert_eq!(tokens.len(), 2, "a start and the retry's: {tokens:?}");
    assert!(
        eventually(Duration::from_secs(5), || tokens.iter().all(|t| pids_with_arg(t).is_empty())),
        "both killed: {tokens:?}"
    );
}

// --- the python client ----------------------------------------------------------

/// A python client worker exercising the services (`do` in the args says what).
const PY_WORKER: &str = concat!(
    py_token!(),
    r#"
import time
from ctxhost_rpc import host, RpcError


def attempt(method, params):
    try:
        return {"ok": host.call(method, params)}
    except RpcError as e:
        return {"code": e.code, "message": e.message}


@host.hook("tool_call_pre")
def tool_call_pre(request):
    args = request["args"]
    do = args.get("do")
    if do == "boom":
        raise ValueError("boom requested")
    if do == "services":
        me = "/plugins/" + args["plugin"]
        seen = {"worker": TOKEN}
        seen["get_default"] = host.call("config.get", {"key": "LIMIT"})
        seen["set"] = host.call("config.set", {"key": "LIMIT", "value": 7})
        seen["get_after"] = host.call("config.get", {"key": "LIMIT"})
        seen["write"] = host.call("vfs.write", {"path": me + "/notes/./a.txt", "content": "line one\nline two"})
        seen["read"] = host.call("vfs.read", {"path": me + "/notes/a.txt"})
        seen["list"] = host.call("vfs.list", {"path": me + "/notes"})
        seen["storage_set"] = host.call("storage.set", {"key": "k", "value": {"n": 1}, "scope": "session"})
        seen["storage_get"] = host.call("storage.get", {"key": "k", "scope": "session"})
        seen["storage_global"] = host.call("storage.get", {"key": "k"})
        seen["trigger"] = host.call("trigger.create", {"id": "t-1", "type": "event", "event_name": "deploy"})
        seen["trigger_get"] = host.call("trigger.get", {"id": "t-1"})
        host.log("services used by " + args["plugin"])
        return seen
    if do == "errors":
        return {
            "unknown_method": attempt("config.gett", {"key": "LIMIT"}),
            "unknown_key": attempt("config.set", {"key": "NOPE", "value": 1}),
            "bad_value": attempt("config.set", {"key": "LIMIT", "value": "many"}),
            "vfs_elsewhere": attempt("vfs.write", {"path": "/plugins/someone-else/x", "content": "no"}),
        }
    if do == "meet":
        host.call("storage.set", {"key": args["mine"], "value": True})
        for _ in range(1000):
            if host.call("storage.get", {"key": args["other"]}):
                return {"met": True, "worker": TOKEN}
            time.sleep(0.01)
        return {"met": False, "worker": TOKEN}
    return {"action": "pass", "worker": TOKEN}


def read_symbolic(request):
    return "computed " + request["path"]


host.on("read_symbolic", read_symbolic)
host.run()
"#
);

/// What a worker saw of the services in one call, checked against the
/// host's own view of them afterwards.
fn check_services_seen(loaded: &Loaded, name: &str, seen: &Value) {
    let me = format!("/plugins/{name}");
    assert_eq!(seen["get_default"], 3, "the schema default: {seen}");
    assert_eq!(seen["set"], 7);
    assert_eq!(seen["get_after"], 7);
    assert_eq!(seen["write"], format!("{me}/notes/a.txt"), "the normal form of the path");
    assert_eq!(seen["read"], "line one\nline two");
    assert_eq!(seen["list"], json!(["a.txt"]));
    assert_eq!(seen["storage_set"], Value::Null);
    assert_eq!(seen["storage_get"], json!({"n": 1}), "session scope of the call's agent");
    assert_eq!(seen["storage_global"], Value::Null, "scopes are apart");
    assert_eq!(seen["trigger"], "t-1");
    assert_eq!(seen["trigger_get"]["event_name"], "deploy");
    assert_eq!(seen["trigger_get"]["plugin"], name, "the host records the creator");

    // The host's side of the same state.
    let shared = loaded.shared.as_ref().unwrap();
    match shared.vfs().read(&format!("{me}/notes/a.txt")).unwrap() {
        Read::Text(t) => assert_eq!(t, "line one\nline two"),
        _ => panic!("the file is not in the host's vfs"),
    }
    assert_eq!(shared.triggers().get("t-1").unwrap().and_then(|t| t.get("plugin").cloned()), Some(json!(name)));
    // Persisted: a store opened afresh on the database file reads it.
    let fresh = ctxhost::host::store::sqlite::SqliteStore::open(&loaded.home.state_db()).unwrap();
    let stored = ctxhost::host::store::Store::config_values(&fresh, name).unwrap();
    assert_eq!(stored["LIMIT"], 7, "persisted: {stored:?}");
    let view = ctxhost::plugin::config_view_file(&loaded.home, name);
    let view: Value = serde_json::from_str(&std::fs::read_to_string(view).unwrap()).unwrap();
    assert_eq!(view["LIMIT"], 7, "the one-shot config view follows");
}

#[test]
fn the_python_client_calls_the_services_during_a_hook() {
    let name = "rpc-py-services";
    let p = python_plugin(name, PY_WORKER, &["tool_call_pre", "read_symbolic"], "");
    let rt = rt();
    let loaded = load(&p, true);
    let seen = loaded.call(&rt, HookName::ToolCallPre, tool_call(json!({"do": "services", "plugin": name}))).unwrap();
    check_services_seen(&loaded, name, &seen);
    let pass = loaded.call(&rt, HookName::ToolCallPre, tool_call(json!({}))).unwrap();
    assert_eq!(pass["action"], "pass");
    assert_eq!(token_of(&pass), token_of(&seen), "one worker served both calls");
    let sym = loaded.call(&rt, HookName::ReadSymbolic, json!({"path": "/plugins/x/live"})).unwrap();
    assert_eq!(sym, "computed /plugins/x/live", "vfs/read_symbolic reaches its handler");
}

/// The service errors a worker gets back, as the client saw them.
fn check_service_errors(errors: &Value) {
    assert_eq!(errors["unknown_method"]["code"], -32601, "{errors}");
    let m = errors["unknown_method"]["message"].as_str().unwrap();
    assert!(m.contains("config.gett") && m.contains("config.get"), "names it, with a hint: {m}");
    let m = errors["unknown_key"]["message"].as_str().unwrap();
    assert!(m.contains("NOPE"), "names the key: {errors}");
    assert!(errors["unknown_key"]["code"].as_i64().unwrap() < 0);
    let m = errors["bad_value"]["message"].as_str().unwrap();
    assert!(m.contains("LIMIT"), "names the key: {errors}");
    assert!(errors["vfs_elsewhere"]["code"].as_i64().is_some(), "{errors}");
}

#[test]
fn service_errors_come_back_as_json_rpc_errors() {
    let p = python_plugin("rpc-py-errors", PY_WORKER, &["tool_call_pre"], "");
    let rt = rt();
    let loaded = load(&p, true);
    let errors = loaded.call(&rt, HookName::ToolCallPre, tool_call(json!({"do": "errors"}))).unwrap();
    check_service_errors(&errors);

    // Without services: every call is refused, naming the plugin.
    let p = python_plugin("rpc-py-no-services", PY_WORKER, &["tool_call_pre"], "");
    let bare = load(&p, false);
    let errors = bare.call(&rt, HookName::ToolCallPre, tool_call(json!({"do": "errors"}))).unwrap();
    for key in ["unknown_method", "unknown_key"] {
        assert_eq!(errors[key]["code"], -32000, "{errors}");
        assert_eq!(errors[key]["message"], "no host services are attached to plugin 'rpc-py-no-services'");
    }
}

#[test]
fn an_error_answer_fails_the_call_and_keeps_the_worker() {
    let p = python_plugin("rpc-py-boom", PY_WORKER, &["tool_call_pre"], "");
    let rt = rt();
    let loaded = load(&p, true);
    let before = token_of(&loaded.call(&rt, HookName::ToolCallPre, tool_call(json!({}))).unwrap());
    let worker = pid_with_token(&before);
    let err = loaded.call(&rt, HookName::ToolCallPre, tool_call(json!({"do": "boom"}))).unwrap_err();
    assert!(matches!(err, HookError::Failed(_)), "{err:?}");
    assert_eq!(err.kind(), ctxhost::runner::ErrorKind::Failed, "the plugin's own error answer");
    let text = err.to_string();
    assert!(
        text.contains("ValueError: boom requested") && text.contains("hook/tool_call_pre") && text.contains("-32000"),
        "{text}"
    );
    let after = token_of(&loaded.call(&rt, HookName::ToolCallPre, tool_call(json!({}))).unwrap());
    assert_eq!(after, before, "the worker answered, so it stays");
    assert_eq!(pid_with_token(&before), worker);
    assert!(!is_dead(worker));
}

#[test]
fn two_workers_use_the_services_at_the_same_time() {
    // Each call waits (through storage.get) for the other's storage.set: only
    // service calls running side by side let both finish.
    let p = python_plugin("rpc-py-meet", PY_WORKER, &["tool_call_pre"], "max_workers = 2\nhook_timeout_secs = 20");
    let rt = rt();
    let loaded = Arc::new(load(&p, true));
    let calls: Vec<_> = [("a", "b"), ("b", "a")]
        .into_iter()
        .map(|(mine, other)| {
            let loaded = loaded.clone();
            rt.spawn(async move {
                let body = tool_call(json!({"do": "meet", "mine": mine, "other": other}));
                let request = HookRequest::from_json(HookName::ToolCallPre, body).unwrap();
                loaded.plugin.runner.call(&request, &CallOptions::default()).await
            })
        })
        .collect();
    let replies: Vec<Value> = calls.into_iter().map(|h| rt.block_on(h).unwrap().unwrap()).collect();
    assert!(replies.iter().all(|r| r["met"] == true), "{replies:?}");
    assert_ne!(token_of(&replies[0]), token_of(&replies[1]), "two workers");
}

// --- the node client --------------------------------------------------------------

const NODE_WORKER: &str = r#"
const { host, RpcError } = require('./ctxhost_rpc');
const TOKEN = 'worker-' + require('crypto').randomUUID();

async function attempt(method, params) {
  try {
    return { ok: await host.call(method, params) };
  } catch (e) {
    if (!(e instanceof RpcError)) throw e;
    return { code: e.code, message: e.message };
  }
}

host.on('tool_call_pre', async (request) => {
  const args = request.args;
  if (args.do === 'boom') throw new TypeError('boom requested');
  if (args.do === 'services') {
    const me = '/plugins/' + args.plugin;
    const seen = { worker: TOKEN };
    seen.get_default = await host.call('config.get', { key: 'LIMIT' });
    seen.set = await host.call('config.set', { key: 'LIMIT', value: 7 });
    seen.get_after = await host.call('config.get', { key: 'LIMIT' });
    seen.write = await host.call('vfs.write', { path: me + '/notes/./a.txt', content: 'line one\nline two' });
    seen.read = await host.call('vfs.read', { path: me + '/notes/a.txt' });
    seen.list = await host.call('vfs.list', { path: me + '/notes' });
    seen.storage_set = await host.call('storage.set', { key: 'k', value: { n: 1 }, scope: 'session' });
    seen.storage_get = await host.call('storage.get', { key: 'k', scope: 'session' });
    seen.storage_global = await host.call('storage.get', { key: 'k' });
    seen.trigger = await host.call('trigger.create', { id: 't-1', type: 'event', event_name: 'deploy' });
    seen.trigger_get = await host.call('trigger.get', { id: 't-1' });
    host.log('services used by ' + args.plugin);
    return seen;
  }
  if (args.do === 'errors') {
    return {
      unknown_method: await attempt('config.gett', { key: 'LIMIT' }),
      unknown_key: await attempt('config.set', { key: 'NOPE', value: 1 }),
      bad_value: await attempt('config.set', { key: 'LIMIT', value: 'many' }),
      vfs_elsewhere: await attempt('vfs.write', { path: '/plugins/someone-else/x', content: 'no' }),
    };
  }
  return { action: 'pass', worker: TOKEN };
});

host.on('read_symbolic', (request) => 'computed ' + request.path);

host.run();
"#;

#[test]
fn the_node_client_calls_the_services_during_a_hook() {
    let name = "rpc-node-services";
    let p = node_plugin(name, NODE_WORKER, &["tool_call_pre", "read_symbolic"], "");
    let rt = rt();
    let loaded = load(&p, true);
    let seen = loaded.call(&rt, HookName::ToolCallPre, tool_call(json!({"do": "services", "plugin": name}))).unwrap();
    check_services_seen(&loaded, name, &seen);
    let errors = loaded.call(&rt, HookName::ToolCallPre, tool_call(json!({"do": "errors"}))).unwrap();
    check_service_errors(&errors);
    let err = loaded.call(&rt, HookName::ToolCallPre, tool_call(json!({"do": "boom"}))).unwrap_err().to_string();
    assert!(err.contains("TypeError: boom requested"), "{err}");
    let pass = loaded.call(&rt, HookName::ToolCallPre, tool_call(json!({}))).unwrap();
    assert_eq!(pass["action"], "pass");
    assert_eq!(token_of(&pass), token_of(&seen), "one worker served every call, the failed one too");
    let sym = loaded.call(&rt, HookName::ReadSymbolic, json!({"path": "/plugins/x/live"})).unwrap();
    assert_eq!(sym, "computed /plugins/x/live");
}

// --- through `ctxhost hook` -------------------------------------------------------

/// `ctxhost hook <dir> <hook>` with `CTXHOST_HOME=<home>` and `input` on stdin.
fn hook_cmd(home: &Path, dir: &Path, hook: &str, input: &Value) -> assert_cmd::assert::Assert {
    ctxhost()
        .env("CTXHOST_HOME", home)
        .args(["hook", dir.to_str().unwrap(), hook])
        .write_stdin(input.to_string())
        .assert()
}

fn hook_reply(home: &Path, dir: &Path, hook: &str, input: Value) -> Value {
    let a = hook_cmd(home, dir, hook, &input).success();
    crate::util::reply(&a)
}

#[test]
fn worker_logs_and_skipped_lines_reach_the_log_bounded() {
    // The client's `log` notification is logged as the plugin's.
    let p = python_plugin("rpc-cli-log", PY_WORKER, &["tool_call_pre"], "");
    let a = hook_cmd(&p.home, &p.dir, "tool_call_pre", &tool_call(json!({"do": "services", "plugin": "rpc-cli-log"})))
        .success();
    let err = crate::util::stderr(&a);
    assert!(err.contains("services used by rpc-cli-log"), "{err}");

    // 50 junk lines: the call succeeds, and at most 10 of them are logged.
    let junk = r#"
import json, sys
for line in sys.stdin:
    req = json.loads(line)
    for i in range(50):
        sys.stdout.write("junk line %d\n" % i)
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": req["id"], "result": {"action": "pass"}}) + "\n")
    sys.stdout.flush()
"#;
    let p = python_plugin("rpc-cli-junk", junk, &["tool_call_pre"], "");
    let a = hook_cmd(&p.home, &p.dir, "tool_call_pre", &tool_call(json!({}))).success();
    assert_eq!(crate::util::reply(&a), json!({"action": "pass"}));
    let err = crate::util::stderr(&a);
    let logged = err.lines().filter(|l| l.contains("skipped a worker line")).count();
    assert_eq!(logged, 10, "rate-limited: {err}");
    assert!(err.contains("junk line 0") && !err.contains("junk line 10"), "{err}");
}

/// The guard's replies, whatever runs it (the shared contract of the three
/// guard plugins).
fn check_guard(name: &str) {
    let p = example(name);
    let (home, dir) = (p.home.clone(), p.dir.clone());
    let tool = |name: &str, command: Value| json!({"name": name, "args": {"command": command}, "agent_id": "a"});
    let memory = |content: &str| json!({"content": content, "metadata": {"source": "test"}});
    let block = |pattern: &str| json!({"action": "block", "reason": format!("guard: refusing a command containing `{pattern}`")});
    let pass = json!({"action": "pass"});

    assert_eq!(
        hook_reply(&home, &dir, "tool_call_pre", tool("shell_exec", json!("sudo rm -rf / --now"))),
        block("rm -rf")
    );
    assert_eq!(hook_reply(&home, &dir, "tool_call_pre", tool("shell_exec", json!("ls -la"))), pass);
    assert_eq!(
        hook_reply(&home, &dir, "tool_call_pre", tool("file_write", json!("rm -rf /"))),
        pass,
        "other tools pass"
    );
    assert_eq!(hook_reply(&home, &dir, "tool_call_pre", tool("shell_exec", json!(["rm -rf"]))), pass, "not a string");
    assert_eq!(
        hook_reply(&home, &dir, "memory_write_pre", memory("mail bob.smith+x@mail.example.com, or a_b%c@x-y.org now")),
        json!({"action": "replace", "value": "mail [email], or [email] now"})
    );
    assert_eq!(hook_reply(&home, &dir, "memory_write_pre", memory("no address here, not even a@b.c or @x.com")), pass);

    // A changed pattern, as the config service stores it.
    write(&home.join("agent/plugins").join(name).join("agent_config.json"), r#"{"BLOCK_PATTERN":"drop table"}"#);
    assert_eq!(
        hook_reply(&home, &dir, "tool_call_pre", tool("shell_exec", json!("psql -c 'drop table users'"))),
        block("drop table")
    );
    assert_eq!(hook_reply(&home, &dir, "tool_call_pre", tool("shell_exec", json!("rm -rf /"))), pass);
}

#[test]
fn the_python_guard_worker_blocks_passes_and_redacts() {
    require_program("python3", "python3");
    check_guard("guard-python");
}

#[test]
fn the_node_guard_script_blocks_passes_and_redacts() {
    require_program("node", "nodejs");
    check_guard("guard-node");
}

/// Every stand-alone copy of a JSON-RPC client in the repository (a plugin
/// dir that ships it, e.g. guest-examples/guard-python, a scaffold template)
/// is byte for byte the one in guest-examples/rpc-clients. (The FaustBot shim
/// has no copy: it embeds that file, `faust::shim`'s own test checks it.)
#[test]
fn every_copy_of_a_jsonrpc_client_is_identical_to_the_one_in_rpc_clients() {
    fn copies(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() && !matches!(name.as_str(), "target" | "node_modules" | ".git" | "rpc-clients") {
                copies(&path, out);
            } else if name == "ctxhost_rpc.py" || name == "ctxhost_rpc.js" {
                out.push(path);
            }
        }
    }
    let root = repo_root();
    let mut found = Vec::new();
    for dir in ["guest-examples", "src", "tests"] {
        copies(&root.join(dir), &mut found);
    }
    let read = |path: &Path| std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        found.iter().any(|p| p.ends_with("guest-examples/guard-python/hooks/ctxhost_rpc.py")),
        "the guard's copy is found: {found:?}"
    );
    for copy in &found {
        let name = copy.file_name().unwrap_or_default();
        let original = root.join("guest-examples/rpc-clients").join(name);
        assert!(read(copy) == read(&original), "{} differs from {}: copy it again", copy.display(), original.display());
    }
}

/// Writes a 1 MiB vfs file, then asks for it thousands of times without
/// ever reading an answer.
const FLOOD: &str = r#"
import json, sys
sys.stdin.readline()
sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": "w0", "method": "vfs.write",
    "params": {"path": "/plugins/rpc-flood/big", "content": "x" * (1 << 20)}}) + "\n")
sys.stdout.flush()
sys.stdin.readline()
for i in range(3000):
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": "r%d" % i, "method": "vfs.read",
        "params": {"path": "/plugins/rpc-flood/big"}}) + "\n")
sys.stdout.flush()
import time
time.sleep(60)
"#;

#[test]
fn a_worker_flooding_requests_without_reading_answers_is_stopped() {
    let p = python_plugin("rpc-flood", FLOOD, &["tool_call_pre"], "hook_timeout_secs = 3");
    let rt = rt();
    let loaded = load(&p, true);
    let started = Instant::now();
    let err = loaded.call(&rt, HookName::ToolCallPre, tool_call(json!({}))).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("without reading the answers") || msg.contains("timed out"), "{msg}");
    assert!(started.elapsed() < Duration::from_secs(10), "bounded: {:?}", started.elapsed());
}

/// Notes each call it gets in `calls`, then dies without answering.
const DIES: &str = r#"
import sys
line = sys.stdin.readline()
with open("calls", "a") as f:
    f.write(line)
sys.exit(1)
"#;

#[test]
fn a_failed_tool_call_is_not_retried_but_a_failed_check_is() {
    let p = python_plugin("rpc-dies", DIES, &["tool_call_pre", "call_tool"], "");
    let rt = rt();
    let loaded = load(&p, true);
    let calls = || std::fs::read_to_string(p.dir.join("calls")).unwrap_or_default().lines().count();
    let tool = json!({"name": "shell_exec", "args": {"command": "rm x"}});
    assert!(loaded.call(&rt, HookName::CallTool, tool).is_err());
    assert_eq!(calls(), 1, "a tool that may have run is not run again");
    assert!(loaded.call(&rt, HookName::ToolCallPre, tool_call(json!({}))).is_err());
    assert_eq!(calls(), 3, "a check is retried once on a fresh worker");
}
