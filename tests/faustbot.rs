//! FaustBot plugins (issue 8) run unmodified through `ctxhost serve`: the
//! three examples of `guest-examples/faustbot/` over FaustBot's routes and
//! the agent-loop routes; every hook mapping written as `def` and as
//! `async def`; `ctx` methods with and without `await`; permissions; the
//! per-plugin virtual environment; plugins failing to import or to start;
//! `"enabled": false`; reload of one plugin.
//!
//! Each test shares one daemon across many checks (the python workers are
//! persistent, so a check costs a request, not a process start).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::util::examples::{copy_example, repo_root};
use crate::util::http::{Daemon, Response};
use crate::util::write;

/// A home with a plugins dir.
struct Site {
    dir: tempfile::TempDir,
}

impl Site {
    fn new() -> Site {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("plugins")).unwrap();
        Site { dir }
    }

    fn home(&self) -> &Path {
        self.dir.path()
    }

    fn plugin_dir(&self, name: &str) -> PathBuf {
        self.home().join("plugins").join(name)
    }

    /// `guest-examples/faustbot/<name>` into the plugins dir.
    fn example(&self, name: &str) {
        copy_example(&format!("faustbot/{name}"), &self.plugin_dir(name));
    }

    /// A FaustBot plugin: `plugin.json` (`manifest`, completed with the id,
    /// name, version and entry) and `impl.py`.
    fn faust(&self, name: &str, manifest: Value, impl_py: &str) {
        let mut pj = json!({"id": name, "name": name, "version": "0.1.0", "entry": "impl.py"});
        if let (Some(pj), Value::Object(extra)) = (pj.as_object_mut(), manifest) {
            pj.extend(extra);
        }
        let dir = self.plugin_dir(name);
        write(&dir.join("plugin.json"), &serde_json::to_string_pretty(&pj).unwrap());
        write(&dir.join("impl.py"), impl_py);
    }

    /// The lines a test plugin appended to `<plugin>/log.jsonl`.
    fn log(&self, name: &str) -> Vec<Value> {
        std::fs::read_to_string(self.plugin_dir(name).join("log.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{name}/log.jsonl: {e}: {l}")))
            .collect()
    }

    fn start(&self, envs: &[(&str, &str)]) -> Daemon {
        Daemon::start(self.home(), &[], envs)
    }

    fn ctxhost(&self, args: &[&str]) {
        crate::util::ctxhost().arg("--home").arg(self.home()).args(args).assert().success();
    }
}

/// Waits up to `secs` for `done`.
fn within(secs: u64, what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(secs), "timed out after {secs} s waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn communicate(d: &Daemon, id: &str, payload: Value) -> Response {
    d.post(&format!("/faust/plugins/{id}/communicate"), &payload.to_string())
}

/// A communicate call that must answer 200; its body.
fn ask(d: &Daemon, id: &str, payload: Value) -> Value {
    let r = communicate(d, id, payload.clone());
    assert_eq!(r.status, 200, "{id} {payload}: {}", r.body);
    r.json()
}

fn hook(d: &Daemon, hook: &str, request: Value) -> Response {
    d.post(&format!("/api/agent-hooks/{hook}"), &request.to_string())
}

fn message(d: &Daemon, agent: &str, text: &str) -> Value {
    let r = d.post(&format!("/api/agents/{agent}/messages"), &json!({"text": text}).to_string());
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()
}

fn tool(d: &Daemon, name: &str, args: Value) -> Response {
    d.post(&format!("/api/agents/a1/tools/{name}"), &json!({"args": args}).to_string())
}

fn agent_plugins(d: &Daemon) -> Vec<Value> {
    let r = d.get("/api/agent/plugins");
    assert_eq!(r.status, 200, "{}", r.body);
    r.json().as_array().unwrap().clone()
}

fn agent_plugin(d: &Daemon, name: &str) -> Value {
    agent_plugins(d)
        .into_iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no plugin {name} in {}", d.get("/api/agent/plugins").body))
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

// --- the three examples ------------------------------------------------------

#[test]
fn the_examples_run_unmodified_through_faustbots_routes_and_the_agent_loop() {
    let site = Site::new();
    for name in ["reminder", "calculator", "filter"] {
        site.example(name);
    }
    let started = Instant::now();
    let d = site.start(&[]);
    let start_ms = started.elapsed().as_millis();

    // The loop in plugin.json priority order (smaller first), with what each registered.
    let plugins = agent_plugins(&d);
    let names: Vec<&str> = plugins.iter().map(|p| p["name"].as_str().unwrap_or("?")).collect();
    assert_eq!(names, ["filter", "calculator", "reminder"], "{plugins:?}");
    let hooks =
        |p: &Value| p["hooks"].as_array().unwrap().iter().map(|h| h.as_str().unwrap().to_owned()).collect::<Vec<_>>();
    assert_eq!(
        hooks(&plugins[0]),
        [
            "message_received",
            "agent_event_sent",
            "memory_read_pre",
            "memory_read_post",
            "memory_write_pre",
            "memory_write_post",
            "trigger_append",
            "config_changed",
            "communicate"
        ]
    );
    assert_eq!(hooks(&plugins[1]), ["tool_call_pre", "tool_call_post", "health_check", "communicate", "call_tool"]);
    assert_eq!(
        hooks(&plugins[2]),
        ["trigger_fire", "heartbeat", "health_check", "config_changed", "communicate", "run_schedule", "read_symbolic"]
    );
    assert_eq!(plugins[1]["tools"], json!(["add", "divide"]));
    assert_eq!(plugins[1]["permissions"], json!(["tool:add", "tool:divide"]));
    assert_eq!(plugins[1]["refused"], json!([]));
    assert_eq!(plugins[2]["priority"], 200);
    assert_eq!(plugins[2]["schedules"][0]["id"], "reminder-sweep");
    assert_eq!(plugins[2]["schedules"][0]["interval_secs"].as_f64(), Some(1.0), "SWEEP_INTERVAL_SEC's default");
    assert_eq!(plugins[2]["frontend"], json!({"js": ["panel.js"], "css": ["panel.css"]}));

    // --- reminder: frontend files and assets ---
    let js = d.get("/faust/plugins/reminder/frontend/panel.js");
    assert_eq!(js.status, 200, "{}", js.body);
    assert!(js.header("content-type").unwrap_or("").starts_with("text/javascript"), "{:?}", js.headers);
    let source = repo_root().join("guest-examples/faustbot/reminder/frontend");
    assert_eq!(js.body, std::fs::read_to_string(source.join("panel.js")).unwrap());
    let css = d.get("/faust/plugins/reminder/frontend/panel.css");
    assert_eq!(css.status, 200);
    assert!(css.header("content-type").unwrap_or("").starts_with("text/css"), "{:?}", css.headers);
    assert_eq!(css.body, std::fs::read_to_string(source.join("panel.css")).unwrap());
    for outside in [
        "/faust/plugins/reminder/frontend/../impl.py",
        "/faust/plugins/reminder/frontend/%2e%2e/impl.py",
        "/faust/plugins/reminder/frontend/../plugin.json",
        "/faust/plugins/reminder/frontend/missing.js",
        "/faust/plugins/nobody/frontend/panel.js",
    ] {
        let r = d.get(outside);
        assert_eq!(r.status, 404, "{outside}: {}", r.body);
        assert!(!r.body.contains("faust_backend"), "{outside} leaked a file: {}", r.body);
    }
    let assets = d.get("/faust/admin/plugins/assets");
    assert_eq!(
        (assets.status, assets.json()),
        (
            200,
            json!({"status": "ok", "assets": [
                {"type": "js", "path": "/faust/plugins/reminder/frontend/panel.js", "plugin_id": "reminder"},
                {"type": "css", "path": "/faust/plugins/reminder/frontend/panel.css", "plugin_id": "reminder"},
            ]})
        )
    );

    // --- reminder: config registered by startup (await ctx.register_config) ---
    let config = d.get("/api/plugins/reminder/config").json();
    assert_eq!(config["values"], json!({"DEFAULT_DELAY_SEC": 60, "PREFIX": "Reminder", "SWEEP_INTERVAL_SEC": 1}));
    let types: Vec<(&str, &str)> = config["schema"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["key"].as_str().unwrap(), f["type"].as_str().unwrap()))
        .collect();
    assert_eq!(types, [("DEFAULT_DELAY_SEC", "int"), ("PREFIX", "str"), ("SWEEP_INTERVAL_SEC", "int")]);
    assert_eq!(config["schema"][0]["label"], "Default delay (seconds)");

    // --- reminder: vfs written by startup, and the symbolic node ---
    let index = d.get("/api/vfs?path=/plugins/reminder/index.md");
    assert_eq!(index.json()["content"], "# Reminders\n\nNo pending reminders.\n", "{}", index.body);
    let status = d.get("/api/vfs?path=/plugins/reminder/status.json");
    assert_eq!(status.status, 200, "{}", status.body);
    let status: Value = serde_json::from_str(status.json()["content"].as_str().unwrap()).unwrap();
    assert_eq!(status["pending"], 0, "computed by the plugin on read: {status}");

    // --- reminder: communicate actions, one creating a trigger that fires ---
    let made = ask(&d, "reminder", json!({"action": "remind", "text": "stretch", "in_seconds": 1}));
    assert_eq!(made["status"], "ok", "{made}");
    let id = made["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("reminder::"), "{made}");
    let later = ask(&d, "reminder", json!({"action": "remind", "text": "water the plants", "in_seconds": 3600}));
    let later_id = later["id"].as_str().unwrap().to_owned();
    let listed = ask(&d, "reminder", json!({"action": "list"}));
    let texts: Vec<&str> =
        listed["reminders"].as_array().unwrap().iter().map(|r| r["text"].as_str().unwrap()).collect();
    assert!(texts.contains(&"water the plants"), "{listed}");
    let stored = d.get(&format!("/api/triggers/{later_id}")).json();
    assert_eq!(
        (&stored["type"], &stored["recall_description"]),
        (&json!("datetime"), &json!("Reminder: water the plants"))
    );
    assert_eq!(stored["plugin"], "reminder", "the host knows who made it: {stored}");
    within(10, "the reminder to fire and reach trigger_fire", || {
        ask(&d, "reminder", json!({"action": "get_state"}))["state"]["fired"]
            .as_array()
            .is_some_and(|f| f.iter().any(|r| r["id"] == id.as_str()))
    });
    let fired = d.get("/api/triggers/fired").json();
    assert!(fired.as_array().unwrap().iter().any(|t| t["id"] == id.as_str()), "delivered: {fired}");
    within(10, "the index to drop the fired reminder", || {
        !d.get("/api/vfs?path=/plugins/reminder/index.md").json()["content"]
            .as_str()
            .unwrap_or("stretch")
            .contains("stretch")
    });
    let index = d.get("/api/vfs?path=/plugins/reminder/index.md").json()["content"].as_str().unwrap().to_owned();
    assert!(index.starts_with("# Reminders\n\n- water the plants (due "), "{index}");
    // A trigger the filter plugin refuses (trigger_append returning None) raises in trigger_create.
    let refused = ask(&d, "reminder", json!({"action": "remind", "text": "buy now: shoes"}));
    assert_eq!(refused["status"], "error", "{refused}");
    assert!(refused["detail"].as_str().unwrap().contains("filter"), "{refused}");
    // None from the handler is FaustBot's {"status": "ok"}; an unknown action is the plugin's own error.
    assert_eq!(ask(&d, "reminder", json!({"action": "ack"})), json!({"status": "ok"}));
    assert_eq!(ask(&d, "reminder", json!({"action": "get_state"}))["state"]["fired"], json!([]));
    assert_eq!(
        ask(&d, "reminder", json!({"action": "fly"})),
        json!({"status": "error", "detail": "unknown action: fly"})
    );
    let r = communicate(&d, "nobody", json!({}));
    assert_eq!((r.status, &r.json()["detail"]), (404, &json!("Plugin not found: nobody")));

    // --- reminder: PUT config fires config_changed, which refreshes the plugin's cache ---
    let put =
        d.send("PUT", "/api/plugins/reminder/config", Some(r#"{"values":{"DEFAULT_DELAY_SEC":"5","PREFIX":"Hey"}}"#));
    assert_eq!(put.status, 200, "{}", put.body);
    assert_eq!(put.json()["values"]["DEFAULT_DELAY_SEC"], 5, "coerced to the schema's int");
    within(10, "config_changed to reach the plugin", || {
        ask(&d, "reminder", json!({"action": "get_state"}))["state"]["config_changes"]
            .as_array()
            .is_some_and(|c| c.len() >= 2)
    });
    let state = ask(&d, "reminder", json!({"action": "get_state"}))["state"].clone();
    assert_eq!(
        state["config_changes"],
        json!([{"key": "DEFAULT_DELAY_SEC", "old": 60, "new": 5}, {"key": "PREFIX", "old": "Reminder", "new": "Hey"}])
    );
    assert_eq!(state["config"]["DEFAULT_DELAY_SEC"], 5, "the cache was refreshed: {state}");
    let before = now();
    let made = ask(&d, "reminder", json!({"action": "remind", "text": "tea"}));
    let due = made["due"].as_u64().unwrap();
    assert!((before + 5..=now() + 5).contains(&due), "the new default delay: {made}");
    let stored = d.get(&format!("/api/triggers/{}", made["id"].as_str().unwrap())).json();
    assert_eq!(stored["recall_description"], "Hey: tea", "get_config sees the new PREFIX: {stored}");

    // --- reminder: prompt suffix, health ---
    let assembled = d.post(
        "/api/agents/a1/assemble",
        r#"{"system_prompt":"Be brief.","messages":[{"role":"user","content":"hi"}]}"#,
    );
    let prompt = assembled.json()["system_prompt"].as_str().unwrap_or("").to_owned();
    assert!(
        prompt.starts_with(
            "Be brief.\n\n[Reminder] Pending reminders are listed in faustbot://plugins/reminder/index.md"
        ),
        "{prompt}"
    );
    let health = d.get("/api/agent/health").json();
    assert_eq!(health["reminder"]["status"], "ok", "{health}");
    assert_eq!(health["reminder"]["plugin"], "reminder");
    assert_eq!(health["calculator"], json!({"status": "ok", "plugin": "calculator", "tools": ["add", "divide"]}));
    assert_eq!(health["filter"], json!({"status": "ok"}), "no health_check: ok");

    // --- calculator: tools, a plain function and a ToolSpec, through tool_call_pre/post ---
    let tools = d.get("/api/tools").json();
    let add = tools.as_array().unwrap().iter().find(|t| t["name"] == "add").unwrap_or_else(|| panic!("{tools}"));
    assert_eq!(add["plugin"], "calculator");
    assert_eq!(add["parameters"]["required"], json!(["a", "b"]));
    assert_eq!(add["parameters"]["properties"]["a"], json!({"type": "number", "description": "the first number"}));
    let divide = tools.as_array().unwrap().iter().find(|t| t["name"] == "divide").unwrap();
    assert_eq!(divide["description"], "Divide one number by another.", "the ToolSpec's description");
    let r = tool(&d, "add", json!({"a": "0.1", "b": 0.2}));
    assert_eq!((r.status, r.json()), (200, json!({"result": 0.3})), "pre turned \"0.1\" into a number, post rounded");
    let r = tool(&d, "divide", json!({"dividend": 6, "divisor": "3"}));
    assert_eq!((r.status, r.json()), (200, json!({"result": 2})));
    let r = tool(&d, "divide", json!({"dividend": 6, "divisor": "0"}));
    assert_eq!(r.status, 403, "tool_call_pre returned None: {}", r.body);
    assert_eq!(r.json()["plugin"], "calculator");
    let r = tool(&d, "add", json!({"a": "one", "b": 1}));
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(
        ask(&d, "calculator", json!({"action": "stats"})),
        json!({"status": "ok", "divisions": 1, "refused": 2})
    );
    let r = hook(&d, "tool_call_pre", json!({"name": "shell_exec", "args": {"command": "ls"}}));
    assert_eq!((r.status, r.json()), (200, json!({"value": {"command": "ls"}})), "another tool's args pass");
    let r = hook(&d, "tool_call_post", json!({"name": "divide", "args": {}, "result": 2.5000000000001}));
    assert_eq!(r.json(), json!({"value": 2.5}));
    let r = hook(&d, "tool_call_post", json!({"name": "other", "args": {}, "result": 0.30000000000000004}));
    assert_eq!(r.json(), json!({"value": 0.30000000000000004}), "None: unchanged");

    // --- filter: messages (sync hook, session storage per agent) ---
    assert_eq!(message(&d, "a1", "  hello    world "), json!({"text": "hello world"}), "rewritten");
    assert_eq!(
        message(&d, "a1", "hello world"),
        json!({"blocked": true, "plugin": "filter", "reason": "ignored by filter"}),
        "a repeat in a1's session"
    );
    assert_eq!(message(&d, "a2", "hello world"), json!({"text": "hello world"}), "a2 has its own session");
    assert_eq!(message(&d, "a2", "get FREE money now")["blocked"], true, "spam");
    assert_eq!(message(&d, "a2", "plain"), json!({"text": "plain"}), "None: unchanged");
    // --- filter: memory hooks ---
    let r = hook(
        &d,
        "memory_write_pre",
        json!({"content": "mail ann.lee@mail.example.org or call +1 555 123 4567", "metadata": {"path": "notes.md"}}),
    );
    assert_eq!(r.json(), json!({"value": "mail [redacted] or call [redacted]"}), "async def memory_write_pre");
    let r = hook(&d, "memory_write_pre", json!({"content": "nothing to hide", "metadata": {}}));
    assert_eq!(r.json(), json!({"value": "nothing to hide"}));
    let r = hook(&d, "memory_write_post", json!({"content": "x", "metadata": {}, "id": "n1"}));
    assert_eq!((r.status, r.json()), (200, json!({})));
    let r = hook(&d, "memory_read_pre", json!({"query": "  garden   notes ", "filters": null}));
    assert_eq!(r.json(), json!({"value": "garden notes"}));
    let r = hook(
        &d,
        "memory_read_post",
        json!({"query": "q", "results": [{"content": "basil"}, {"content": "diary #private"}]}),
    );
    assert_eq!(r.json(), json!({"value": [{"content": "basil"}]}));
    let r = hook(&d, "memory_read_post", json!({"query": "q", "results": ["a", "b"]}));
    assert_eq!(r.json(), json!({"value": ["a", "b"]}));
    // --- filter: UI events ---
    let r = hook(&d, "agent_event_sent", json!({"event": {"type": "reasoning_delta", "content": "hmm"}}));
    assert_eq!((r.status, r.json()), (403, json!({"blocked": "suppressed by filter", "plugin": "filter"})));
    let r = hook(&d, "agent_event_sent", json!({"event": {"type": "delta", "content": "hi"}}));
    assert_eq!(r.json(), json!({"value": {"type": "delta", "content": "hi"}}));
    let long = "x".repeat(100);
    let r = hook(&d, "agent_event_sent", json!({"event": {"type": "tool_result", "output": long}}));
    assert_eq!(
        r.json()["value"],
        json!({"type": "tool_result", "output": format!("{}…", "x".repeat(80)), "truncated": true})
    );
    // --- filter: trigger_append refuses through POST /api/triggers too ---
    let r = d.post(
        "/api/triggers",
        &json!({"id": "ad", "type": "interval", "interval_seconds": 60, "recall_description": "Buy now!"}).to_string(),
    );
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.json()["plugin"], "filter");
    // --- filter: its counters, kept in ctx.storage's global scope ---
    assert_eq!(
        ask(&d, "filter", json!({"action": "stats"}))["stats"],
        json!({"ignored": 1, "repeats": 1, "redactions": 2, "writes": 1, "hidden": 1, "refused_triggers": 2})
    );

    // --- reminder: the schedule and the heartbeat (every 10 s, as in FaustBot) ---
    let state = ask(&d, "reminder", json!({"action": "get_state"}))["state"].clone();
    assert!(state["sweeps"].as_u64().unwrap() >= 2, "the 1 s sweep runs: {state}");
    within(25, "a heartbeat", || {
        ask(&d, "reminder", json!({"action": "get_state"}))["state"]["heartbeats"].as_u64() >= Some(1)
    });
    let (ok, stderr) = d.stop();
    assert!(ok, "{stderr}");

    // Reminders are triggers: they survive a restart and startup finds them.
    let d = site.start(&[]);
    let listed = ask(&d, "reminder", json!({"action": "list"}));
    let ids: Vec<&str> = listed["reminders"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert!(ids.contains(&later_id.as_str()), "{listed}");
    assert_eq!(d.get("/api/plugins/reminder/config").json()["values"]["PREFIX"], "Hey", "config persisted");
    // Disabled: FaustBot's 503.
    site.ctxhost(&["plugin", "disable", "reminder"]);
    let r = communicate(&d, "reminder", json!({"action": "list"}));
    assert_eq!((r.status, &r.json()["detail"]), (503, &json!("Plugin is disabled: reminder")));
    assert!(d.stop().0);
    eprintln!("faustbot examples: daemon start with 3 plugins {start_ms} ms, whole test {:?}", started.elapsed());
}
