//! FaustBot plugins (issue 8) run unmodified through `ctxhost serve`: the
//! three examples of `guest-examples/faustbot/` over FaustBot's routes and
//! the agent-loop routes; every hook mapping written as `def` and as
//! `async def`; `ctx` methods with and without `await`; permissions; the
//! per-plugin virtual environment; plugins failing to import or to start;
//! `"enabled": false`; reload of one plugin.
//!
//! Each test shares one daemon across many checks (the python workers are
//! persistent, so a check costs a request, not a process start).

use std::path::Path;
use std::time::{Duration, Instant};

use ctxhost::protocol::HookName;
use serde_json::{Value, json};

use crate::util::examples::repo_root;
use crate::util::http::{Daemon, Response};
use crate::util::site::Site;
use crate::util::within;
use crate::util::write;

impl Site {
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
        site.example(&format!("faustbot/{name}"));
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
    within(10, "the 1 s sweep to run twice", || {
        ask(&d, "reminder", json!({"action": "get_state"}))["state"]["sweeps"].as_u64() >= Some(2)
    });
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

// --- every hook, as `def` and as `async def` ---------------------------------

/// A FaustBot plugin implementing every hook, all `def` (`"sync"`: ctx
/// methods called without `await`, config in FaustBot's legacy string form)
/// or all `async def` (`"async"`: ctx methods awaited, config as a list,
/// plus one ctx call left un-awaited). Every condition names the variant,
/// so both can share one daemon and one chain.
const HOOKS_PLUGIN: &str = r#""""A test plugin: every FaustBot hook, written @V@."""
import json
import os

from faust_backend.plugin_system import FaustPlugin, PluginContext, ToolSpec, hookimpl

V = "@V@"
HERE = os.path.dirname(os.path.abspath(__file__))


def log(entry):
    with open(os.path.join(HERE, "log.jsonl"), "a") as f:
        f.write(json.dumps(entry) + "\n")


class Plugin(FaustPlugin):
    def __init__(self):
        self.ctx = None
        self.reads = 0

    @A@def startup(self, ctx: PluginContext):
        self.ctx = ctx
        @CONFIG@
        @AW@ctx.vfs_write("/plugins/hooks-" + V + "/note.md", "written by " + V)
        @AW@ctx.vfs_write_symbolic("/plugins/hooks-" + V + "/live", self.live)
        @EXTRA@

    @A@def live(self, path):
        self.reads += 1
        return "%s %s read %d" % (V, path, self.reads)

    @A@def register_tools(self, ctx):
        @A@def echo(text: str) -> str:
            """Echo the text."""
            log({"hook": "tool", "text": text})
            return V + ":" + text

        return [ToolSpec(name="echo_" + V, tool=echo)]

    def register_schedules(self):
        return [{"id": "tick-" + V, "interval": 1, "callback": self.tick, "description": "tick"}]

    @A@def tick(self):
        log({"hook": "schedule"})

    @hookimpl
    @A@def message_received(self, msg, history, ctx):
        if "drop-" + V in msg:
            return "__IGNORED__"
        if "keep-" + V in msg:
            return None
        limit = @AW@self.ctx.get_config("LIMIT", 0)
        return "%s [%s:%s]" % (msg, V, limit)

    @hookimpl
    @A@def tool_call_pre(self, name, args, ctx):
        if args.get("deny") == V:
            return None
        if name == "echo_" + V:
            return dict(args, text=args.get("text", "") + "+pre-" + V)
        return args

    @hookimpl
    @A@def tool_call_post(self, name, args, result, ctx):
        if name == "echo_" + V:
            return "%s+post-%s" % (result, V)
        return None

    @hookimpl
    @A@def agent_event_sent(self, event, current_history, ctx):
        if event.get("type") == "secret-" + V:
            return "__IGNORED__"
        if event.get("type") == "patch-" + V:
            return dict(event, patched=V)
        return None

    @hookimpl
    @A@def memory_read_pre(self, query, filters, ctx):
        return query + "|" + V if "tag-" + V in query else None

    @hookimpl
    @A@def memory_read_post(self, query, results, ctx):
        return [r for r in results if r != "hide-" + V] if "hide-" + V in results else None

    @hookimpl
    @A@def memory_write_pre(self, content, metadata, ctx):
        return content.replace("secret-" + V, "[x]") if "secret-" + V in content else None

    @hookimpl
    @A@def memory_write_post(self, content, metadata, id, ctx):
        log({"hook": "memory_write_post", "content": content, "id": id})

    @hookimpl
    @A@def trigger_append(self, payload, ctx):
        if payload.get("recall_description") == "nope-" + V:
            return None
        return dict(payload, **{"seen_" + V: True})

    @hookimpl
    @A@def trigger_fire(self, payload, ctx):
        log({"hook": "trigger_fire", "id": payload.get("id")})
        if payload.get("id") == "mute-" + V:
            return None
        return payload

    @hookimpl
    @A@def config_changed(self, key, old, new, ctx):
        log({"hook": "config_changed", "key": key, "old": old, "new": new})

    @hookimpl
    @A@def heartbeat(self, ctx):
        log({"hook": "heartbeat"})

    @A@def health_check(self):
        return {"status": "ok", "variant": V}

    @A@def communicate_handler(self, payload, ctx):
        action = payload.get("action")
        if action == "none":
            return None
        if action == "list":
            return [1, 2]
        if action == "raise":
            raise RuntimeError("boom-" + V)
        if action == "ctx":
            c = self.ctx
            out = {}
            out["limit"] = @AW@c.get_config("LIMIT")
            out["set"] = @AW@c.set_config("NAME", 42)
            out["configs"] = @AW@c.list_configs()
            out["note"] = @AW@c.vfs_read_text("/plugins/hooks-" + V + "/note.md")
            out["missing"] = @AW@c.vfs_read_text("/plugins/hooks-" + V + "/none.md", "dflt")
            out["live"] = @AW@c.vfs_read_text("/plugins/hooks-" + V + "/live")
            out["listing"] = @AW@c.vfs_list("/plugins/hooks-" + V)
            @AW@c.trigger_create({"id": "t-" + V, "type": "interval", "interval_seconds": 3600, "recall_description": "mine"})
            @AW@c.trigger_update("t-" + V, {"recall_description": "updated"})
            out["trigger"] = @AW@c.trigger_get("t-" + V)
            listed = @AW@c.trigger_list()
            out["count"] = len([t for t in listed if t["id"] == "t-" + V])
            @AW@c.trigger_delete("t-" + V)
            out["gone"] = @AW@c.trigger_get("t-" + V)
            try:
                @AW@c.trigger_create({"id": "bad-" + V, "type": "sometimes"})
                out["invalid"] = "accepted"
            except ValueError:
                out["invalid"] = "ValueError"
            c.storage.set("global", "g", V)
            c.storage.set("session", "s", V + "-session")
            out["storage"] = [c.storage.get("global", "g"), c.storage.get("session", "s"), c.storage.get("session", "nope", "d")]
            return out
        return {"echo": payload, "variant": V}


def get_plugin():
    return Plugin()
"#;

fn hooks_plugin(site: &Site, variant: &str, priority: i64) {
    let is_async = variant == "async";
    let config = if is_async {
        r#"await ctx.register_config([{"key": "LIMIT", "type": "int", "label": "Limit", "default": 3}, {"key": "NAME", "type": "str", "label": "Name", "default": "x"}])"#
    } else {
        // FaustBot's legacy schema lines, and the old sync style.
        r#"ctx.register_config("LIMIT:int:Limit=3\nNAME:str:Name=x")"#
    };
    // The old sync style inside an `async def`: FaustBot's newest backend would
    // drop this call (an un-awaited coroutine); the shim does the work at once.
    let extra = if is_async { r#"ctx.vfs_write("/plugins/hooks-async/unawaited.md", "no await")"# } else { "pass" };
    let source = HOOKS_PLUGIN
        .replace("@V@", variant)
        .replace("@A@", if is_async { "async " } else { "" })
        .replace("@AW@", if is_async { "await " } else { "" })
        .replace("@CONFIG@", config)
        .replace("@EXTRA@", extra);
    site.faust(
        &format!("hooks-{variant}"),
        json!({"priority": priority, "permissions": [format!("tool:echo_{variant}")]}),
        &source,
    );
}

#[test]
fn every_hook_maps_the_same_written_as_def_and_as_async_def() {
    let site = Site::new();
    hooks_plugin(&site, "sync", 10);
    hooks_plugin(&site, "async", 20);
    let d = site.start(&[]);
    let (s, a) = ("hooks-sync", "hooks-async");

    let plugins = agent_plugins(&d);
    let names: Vec<&str> = plugins.iter().map(|p| p["name"].as_str().unwrap_or("?")).collect();
    assert_eq!(names, [s, a], "{plugins:?}");
    // Every agent hook but the two the plugin leaves out (llm_request_pre,
    // plugin_unloaded/on_unload) and register (the call that asks), in HookName's order.
    let expected: Vec<&str> = HookName::AGENT
        .into_iter()
        .filter(|h| !matches!(h, HookName::LlmRequestPre | HookName::Unload | HookName::Register))
        .map(HookName::as_str)
        .collect();
    for p in &plugins {
        assert_eq!(p["hooks"], json!(expected), "{p}");
        assert_eq!(p["refused"], json!([]), "{p}");
    }

    // Config: the legacy string and the list give the same schema.
    let config = |name: &str| d.get(&format!("/api/plugins/{name}/config")).json();
    assert_eq!(config(s), config(a));
    assert_eq!(config(s)["values"], json!({"LIMIT": 3, "NAME": "x"}));
    assert_eq!(
        config(s)["schema"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| (f["key"].clone(), f["type"].clone(), f["label"].clone(), f["default"].clone()))
            .collect::<Vec<_>>(),
        [
            (json!("LIMIT"), json!("int"), json!("Limit"), json!(3)),
            (json!("NAME"), json!("str"), json!("Name"), json!("x"))
        ]
    );

    // message_received: str replaces (each sees the previous), None passes, __IGNORED__ blocks.
    assert_eq!(message(&d, "a1", "hi"), json!({"text": "hi [sync:3] [async:3]"}));
    assert_eq!(message(&d, "a1", "keep-sync hi"), json!({"text": "keep-sync hi [async:3]"}));
    assert_eq!(message(&d, "a1", "keep-sync keep-async"), json!({"text": "keep-sync keep-async"}));
    assert_eq!(
        message(&d, "a1", "drop-async x"),
        json!({"blocked": true, "plugin": a, "reason": "ignored by hooks-async"})
    );
    assert_eq!(
        message(&d, "a1", "drop-sync x"),
        json!({"blocked": true, "plugin": s, "reason": "ignored by hooks-sync"})
    );

    // Tools through tool_call_pre (dict → args) and tool_call_post (value → result).
    let r = tool(&d, "echo_sync", json!({"text": "x"}));
    assert_eq!((r.status, r.json()), (200, json!({"result": "sync:x+pre-sync+post-sync"})));
    let r = tool(&d, "echo_async", json!({"text": "y"}));
    assert_eq!((r.status, r.json()), (200, json!({"result": "async:y+pre-async+post-async"})));
    // tool_call_pre returning None blocks, from either kind of def; the tool never runs.
    let r = tool(&d, "echo_sync", json!({"text": "z", "deny": "async"}));
    assert_eq!((r.status, r.json()), (403, json!({"blocked": "blocked by hooks-async", "plugin": a})));
    let r = tool(&d, "echo_async", json!({"text": "z", "deny": "sync"}));
    assert_eq!((r.status, r.json()["plugin"].clone()), (403, json!(s)));
    let ran = |name: &str| {
        site.log(name).into_iter().filter(|l| l["hook"] == "tool").map(|l| l["text"].clone()).collect::<Vec<_>>()
    };
    assert_eq!(ran(s), [json!("x+pre-sync")]);
    assert_eq!(ran(a), [json!("y+pre-async")]);
    let r = hook(&d, "tool_call_pre", json!({"name": "other", "args": {"k": 1}}));
    assert_eq!(r.json(), json!({"value": {"k": 1}}));
    let r = hook(&d, "tool_call_post", json!({"name": "other", "args": {}, "result": "r"}));
    assert_eq!(r.json(), json!({"value": "r"}), "None: unchanged");

    // agent_event_sent: "__IGNORED__" suppresses, dict replaces, None leaves it.
    for v in ["sync", "async"] {
        let r = hook(&d, "agent_event_sent", json!({"event": {"type": format!("secret-{v}")}}));
        assert_eq!((r.status, r.json()["plugin"].clone()), (403, json!(format!("hooks-{v}"))), "{}", r.body);
        let r = hook(&d, "agent_event_sent", json!({"event": {"type": format!("patch-{v}"), "n": 1}}));
        assert_eq!(r.json(), json!({"value": {"type": format!("patch-{v}"), "n": 1, "patched": v}}));
    }
    let r = hook(&d, "agent_event_sent", json!({"event": {"type": "delta", "content": "c"}}));
    assert_eq!(r.json(), json!({"value": {"type": "delta", "content": "c"}}));

    // Memory hooks.
    let r = hook(&d, "memory_read_pre", json!({"query": "q tag-sync tag-async", "filters": null}));
    assert_eq!(r.json(), json!({"value": "q tag-sync tag-async|sync|async"}));
    let r = hook(&d, "memory_read_pre", json!({"query": "plain", "filters": {"k": 1}}));
    assert_eq!(r.json(), json!({"value": "plain"}));
    let r = hook(&d, "memory_read_post", json!({"query": "q", "results": ["a", "hide-sync", "hide-async"]}));
    assert_eq!(r.json(), json!({"value": ["a"]}));
    let r = hook(&d, "memory_read_post", json!({"query": "q", "results": ["a"]}));
    assert_eq!(r.json(), json!({"value": ["a"]}));
    let r = hook(&d, "memory_write_pre", json!({"content": "secret-sync and secret-async", "metadata": {}}));
    assert_eq!(r.json(), json!({"value": "[x] and [x]"}));
    let r = hook(&d, "memory_write_pre", json!({"content": "open", "metadata": {}}));
    assert_eq!(r.json(), json!({"value": "open"}));
    let r = hook(&d, "memory_write_post", json!({"content": "c", "metadata": {"path": "p"}, "id": "n7"}));
    assert_eq!((r.status, r.json()), (200, json!({})));
    for name in [s, a] {
        let posts: Vec<Value> = site.log(name).into_iter().filter(|l| l["hook"] == "memory_write_post").collect();
        assert_eq!(posts, [json!({"hook": "memory_write_post", "content": "c", "id": "n7"})], "{name}");
    }

    // trigger_append: dict replaces (both ran), None refuses.
    let post = |t: Value| d.post("/api/triggers", &t.to_string());
    let r = post(json!({"id": "loud", "type": "interval", "interval_seconds": 1, "recall_description": "loud"}));
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!((&r.json()["seen_sync"], &r.json()["seen_async"]), (&json!(true), &json!(true)), "{}", r.body);
    for v in ["sync", "async"] {
        let r = post(
            json!({"id": format!("no-{v}"), "type": "interval", "interval_seconds": 1, "recall_description": format!("nope-{v}")}),
        );
        assert_eq!((r.status, r.json()["plugin"].clone()), (403, json!(format!("hooks-{v}"))), "{}", r.body);
        assert_eq!(d.get(&format!("/api/triggers/no-{v}")).status, 404, "not stored");
    }
    // trigger_fire: None cancels the firing; a chain stops at the block.
    post(json!({"id": "mute-sync", "type": "interval", "interval_seconds": 1}));
    post(json!({"id": "mute-async", "type": "interval", "interval_seconds": 1}));
    let fire_log = |name: &str| {
        site.log(name)
            .into_iter()
            .filter(|l| l["hook"] == "trigger_fire")
            .map(|l| l["id"].as_str().unwrap_or("").to_owned())
            .collect::<Vec<_>>()
    };
    within(10, "every trigger to reach trigger_fire", || {
        let (sl, al) = (fire_log(s), fire_log(a));
        ["loud", "mute-sync", "mute-async"].iter().all(|id| sl.iter().any(|x| x == id))
            && ["loud", "mute-async"].iter().all(|id| al.iter().any(|x| x == id))
    });
    assert!(!fire_log(a).iter().any(|x| x == "mute-sync"), "blocked by hooks-sync first: {:?}", fire_log(a));
    let fired: Vec<String> = d
        .get("/api/triggers/fired")
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_owned())
        .collect();
    assert!(fired.contains(&"loud".to_owned()), "{fired:?}");
    assert!(!fired.iter().any(|id| id.starts_with("mute-")), "{fired:?}");
    for id in ["loud", "mute-sync", "mute-async"] {
        assert_eq!(d.send("DELETE", &format!("/api/triggers/{id}"), None).status, 200);
    }

    // read_symbolic: a sync and an async content function, computed on every read.
    for v in ["sync", "async"] {
        let path = format!("/plugins/hooks-{v}/live");
        assert_eq!(d.get(&format!("/api/vfs?path={path}")).json()["content"], format!("{v} {path} read 1"));
        assert_eq!(d.get(&format!("/api/vfs?path={path}")).json()["content"], format!("{v} {path} read 2"));
        let note = d.get(&format!("/api/vfs?path=/plugins/hooks-{v}/note.md")).json();
        assert_eq!(note["content"], format!("written by {v}"), "{note}");
    }
    let unawaited = d.get("/api/vfs?path=/plugins/hooks-async/unawaited.md").json();
    assert_eq!(unawaited["content"], "no await", "an un-awaited ctx call still ran: {unawaited}");

    // config_changed on PUT, and the next hook call sees the value (get_config with and without await).
    let put = d.send("PUT", "/api/plugins/hooks-sync/config", Some(r#"{"values":{"LIMIT":"7"}}"#));
    assert_eq!(put.status, 200, "{}", put.body);
    let changes = |name: &str| site.log(name).into_iter().filter(|l| l["hook"] == "config_changed").collect::<Vec<_>>();
    within(10, "config_changed at hooks-sync", || !changes(s).is_empty());
    assert_eq!(changes(s), [json!({"hook": "config_changed", "key": "LIMIT", "old": 3, "new": 7})]);
    let put = d.send("PUT", "/api/plugins/hooks-async/config", Some(r#"{"values":{"LIMIT":9}}"#));
    assert_eq!(put.status, 200, "{}", put.body);
    within(10, "config_changed at hooks-async", || !changes(a).is_empty());
    assert_eq!(changes(a), [json!({"hook": "config_changed", "key": "LIMIT", "old": 3, "new": 9})]);
    assert_eq!(message(&d, "a1", "hi"), json!({"text": "hi [sync:7] [async:9]"}));

    // communicate: a dict, None → {"status": "ok"}, a list → 400, a raise → 500.
    for (v, name) in [("sync", s), ("async", a)] {
        assert_eq!(ask(&d, name, json!({"q": 1})), json!({"echo": {"q": 1}, "variant": v}));
        assert_eq!(ask(&d, name, json!({"action": "none"})), json!({"status": "ok"}));
        let r = communicate(&d, name, json!({"action": "list"}));
        assert_eq!(
            (r.status, r.json()["detail"].clone()),
            (400, json!(format!("Plugin communicate result must be dict: {name}")))
        );
        let r = communicate(&d, name, json!({"action": "raise"}));
        assert_eq!(r.status, 500, "{}", r.body);
        assert!(r.body.contains(&format!("boom-{v}")), "{}", r.body);
        assert_eq!(ask(&d, name, json!({"q": 2}))["variant"], v, "the worker survived the raise");
    }

    // Every ctx method, awaited (async) and not (sync).
    for (v, name, limit) in [("sync", s, 7), ("async", a, 9)] {
        let out = ask(&d, name, json!({"action": "ctx"}));
        let other = if v == "sync" { "async" } else { "sync" };
        assert_eq!(out["limit"], limit, "{out}");
        assert_eq!(out["set"], "42", "set_config coerces by the schema: {out}");
        assert_eq!(out["configs"], json!({"LIMIT": limit, "NAME": "42"}));
        assert_eq!(out["note"], format!("written by {v}"));
        assert_eq!(out["missing"], "dflt");
        assert!(out["live"].as_str().unwrap().starts_with(&format!("{v} /plugins/hooks-{v}/live read ")), "{out}");
        let mut listing = vec![json!("live"), json!("note.md")];
        if v == "async" {
            listing.push(json!("unawaited.md"));
        }
        assert_eq!(out["listing"], Value::Array(listing));
        let t = &out["trigger"];
        assert_eq!(
            (&t["type"], &t["interval_seconds"], &t["recall_description"]),
            (&json!("interval"), &json!(3600), &json!("updated")),
            "trigger_update merges: {out}"
        );
        assert_eq!(t[format!("seen_{other}")], true, "the other plugin's trigger_append ran: {out}");
        assert_eq!(t[format!("seen_{v}")], Value::Null, "not the creating plugin's own: {out}");
        assert_eq!(
            (&out["count"], &out["gone"], &out["invalid"]),
            (&json!(1), &Value::Null, &json!("ValueError")),
            "{out}"
        );
        assert_eq!(out["storage"], json!([v, format!("{v}-session"), "d"]));
    }
    within(10, "config_changed for set_config", || changes(s).len() >= 2 && changes(a).len() >= 2);
    assert_eq!(
        changes(s)[1],
        json!({"hook": "config_changed", "key": "NAME", "old": "x", "new": "42"}),
        "ctx.set_config fires it too"
    );

    // health_check (sync, and async — awaited), schedules, heartbeats.
    let health = d.get("/api/agent/health").json();
    assert_eq!(health[s], json!({"status": "ok", "variant": "sync"}), "{health}");
    assert_eq!(health[a], json!({"status": "ok", "variant": "async"}), "{health}");
    let count = |name: &str, what: &str| site.log(name).iter().filter(|l| l["hook"] == what).count();
    within(10, "schedules of both", || count(s, "schedule") >= 2 && count(a, "schedule") >= 2);
    within(25, "heartbeats of both", || count(s, "heartbeat") >= 1 && count(a, "heartbeat") >= 1);
    let (ok, stderr) = d.stop();
    assert!(ok, "{stderr}");
}

// --- lifecycle: permissions, failures, enabled, reload ------------------------

/// A plugin answering communicate with `{"v": version}` and logging its
/// unload.
fn morph(version: u32, startup_body: &str) -> String {
    format!(
        r#"import json, os
from faust_backend.plugin_system import FaustPlugin, hookimpl

HERE = os.path.dirname(os.path.abspath(__file__))


class Plugin(FaustPlugin):
    async def startup(self, ctx):
        self.ctx = ctx
        {startup_body}

    @hookimpl
    def plugin_unloaded(self, ctx):
        with open(os.path.join(HERE, "log.jsonl"), "a") as f:
            f.write(json.dumps({{"unloaded": {version}}}) + "\n")

    def communicate_handler(self, payload, ctx):
        return {{"v": {version}}}


def get_plugin():
    return Plugin()
"#
    )
}

#[test]
fn permissions_failing_plugins_enabled_false_and_reload_of_one_plugin() {
    let site = Site::new();
    // Registers two tools but may use one; offers LangChain-style middleware;
    // its undecorated tool_call_pre is no hook (pluggy's rule), so it cannot block anything.
    site.faust(
        "greedy",
        json!({"permissions": ["tool:allowed", "middleware:audit"]}),
        r#"from faust_backend.plugin_system import FaustPlugin, MiddlewareSpec, ToolSpec, hookimpl


def allowed(x: int) -> int:
    """Double x."""
    return 2 * x


def peek(path: str) -> str:
    """Read any file."""
    return open(path).read()


class AuditMiddleware:
    pass


class Plugin(FaustPlugin):
    def register_tools(self, ctx):
        return [allowed, ToolSpec(name="peek", tool=peek)]

    def register_middlewares(self, ctx):
        return [MiddlewareSpec(name="audit", middleware=AuditMiddleware())]

    def tool_call_pre(self, name, args, ctx):
        return None


def get_plugin():
    return Plugin()
"#,
    );
    site.faust(
        "boom",
        json!({}),
        "from faust_backend.plugin_system import FaustPlugin\n\n\nclass Plugin(FaustPlugin):\n    async def startup(self, ctx):\n        raise RuntimeError(\"no database here\")\n\n\ndef get_plugin():\n    return Plugin()\n",
    );
    site.faust(
        "brokenimport",
        json!({}),
        "import ctxhost_surely_missing_dependency\nfrom faust_backend.plugin_system import FaustPlugin\n\n\nclass Plugin(FaustPlugin):\n    pass\n",
    );
    site.faust(
        "sleeper",
        json!({"enabled": false}),
        "from faust_backend.plugin_system import FaustPlugin\n\n\nclass Plugin(FaustPlugin):\n    def communicate_handler(self, payload, ctx):\n        return {\"awake\": True}\n",
    );
    site.faust("morph", json!({}), &morph(1, "pass"));
    let d = site.start(&[]);

    // Permissions: only `tool:allowed` is granted; the rest is refused, and said so.
    let greedy = agent_plugin(&d, "greedy");
    assert_eq!(greedy["tools"], json!(["allowed"]), "{greedy}");
    assert!(!greedy["hooks"].as_array().unwrap().contains(&json!("tool_call_pre")), "undecorated: no hook: {greedy}");
    let refused = greedy["refused"].as_array().unwrap();
    let peek =
        refused.iter().find(|r| r["kind"] == "tool" && r["name"] == "peek").unwrap_or_else(|| panic!("{greedy}"));
    assert!(peek["reason"].as_str().unwrap().contains("\"tool:peek\""), "{peek}");
    let audit = refused
        .iter()
        .find(|r| r["kind"] == "middleware" && r["name"] == "audit")
        .unwrap_or_else(|| panic!("{greedy}"));
    assert!(audit["reason"].as_str().unwrap().contains("middleware is not supported"), "a clear message: {audit}");
    let tools: Vec<Value> = d.get("/api/tools").json().as_array().unwrap().iter().map(|t| t["name"].clone()).collect();
    assert_eq!(tools, [json!("allowed")]);
    assert_eq!(tool(&d, "peek", json!({"path": "/etc/passwd"})).status, 404, "not callable");
    let r = tool(&d, "allowed", json!({"x": 21}));
    assert_eq!((r.status, r.json()), (200, json!({"result": 42})));

    // A plugin raising in startup, and one whose import fails with no readable deps: out, with their error.
    let all = agent_plugins(&d);
    let error = |name: &str| {
        all.iter()
            .find(|p| p["name"] == name)
            .and_then(|p| p["error"].as_str())
            .unwrap_or_else(|| panic!("{name} is not listed as failed: {all:?}"))
            .to_owned()
    };
    let boom = error("boom");
    assert!(boom.contains("startup") && boom.contains("RuntimeError: no database here"), "{boom}");
    let broken = error("brokenimport");
    assert!(broken.contains("No module named 'ctxhost_surely_missing_dependency'"), "{broken}");
    assert!(broken.contains("requirements.txt"), "asks for a requirements.txt: {broken}");
    assert_eq!(communicate(&d, "boom", json!({})).status, 404);
    assert_eq!(communicate(&d, "brokenimport", json!({})).status, 404);
    assert_eq!(ask(&d, "morph", json!({})), json!({"v": 1}), "the others run");

    // "enabled": false in plugin.json: off until enabled.
    assert!(!all.iter().any(|p| p["name"] == "sleeper"), "{all:?}");
    let r = communicate(&d, "sleeper", json!({}));
    assert_eq!((r.status, r.json()["detail"].clone()), (503, json!("Plugin is disabled: sleeper")));
    site.ctxhost(&["plugin", "enable", "sleeper"]);
    let r = d.post("/api/plugins/sleeper/reload", "");
    assert_eq!((r.status, r.json()["active"].clone()), (200, json!(true)), "{}", r.body);
    assert_eq!(ask(&d, "sleeper", json!({})), json!({"awake": true}));

    // Reload picks up a changed impl.py; the old instance gets plugin_unloaded.
    write(&site.plugin_dir("morph").join("impl.py"), &morph(2, "pass"));
    let r = d.post("/api/plugins/morph/reload", "");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(ask(&d, "morph", json!({})), json!({"v": 2}));
    assert_eq!(site.log("morph"), [json!({"unloaded": 1})]);
    // A new version failing in startup is refused; the running one stays.
    write(&site.plugin_dir("morph").join("impl.py"), &morph(3, "raise ValueError('bad config')"));
    let r = d.post("/api/plugins/morph/reload", "");
    assert_eq!((r.status, r.json()["stage"].clone()), (400, json!("start")), "{}", r.body);
    assert!(r.body.contains("bad config"), "{}", r.body);
    assert_eq!(ask(&d, "morph", json!({})), json!({"v": 2}));
    // A plugin that failed at start joins once fixed and reloaded.
    write(&site.plugin_dir("boom").join("impl.py"), &morph(7, "pass"));
    let r = d.post("/api/plugins/boom/reload", "");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(ask(&d, "boom", json!({})), json!({"v": 7}));
    assert!(agent_plugin(&d, "boom").get("error").is_none(), "no longer failed");
    let (ok, stderr) = d.stop();
    assert!(ok, "{stderr}");
}

// --- dependencies in the plugin's own virtual environment --------------------

fn write_probe_wheel(dir: &Path) {
    crate::util::write_wheel(dir, "ctxhost_faust_probe", "from-the-venv");
}

/// A plugin importing the probe package at module level; `deps` is the
/// body of its `register_pip_deps` (None: not defined).
fn probe_plugin(deps: Option<&str>) -> String {
    let deps = deps.map_or(String::new(), |d| format!("\n    def register_pip_deps(self):\n        {d}\n"));
    format!(
        r#"import sys

import ctxhost_faust_probe
from faust_backend.plugin_system import FaustPlugin


class Plugin(FaustPlugin):
    def communicate_handler(self, payload, ctx):
        return {{"value": ctxhost_faust_probe.VALUE, "prefix": sys.prefix}}
{deps}

def get_plugin():
    return Plugin()
"#
    )
}

#[test]
fn dependencies_go_into_each_plugins_own_venv_before_the_import() {
    crate::util::require_program("python3", "python3 python3-venv");
    let site = Site::new();
    let wheels = site.home().join("wheels");
    write_probe_wheel(&wheels);
    site.faust("deps-req", json!({}), &probe_plugin(None));
    write(&site.plugin_dir("deps-req").join("requirements.txt"), "ctxhost_faust_probe==0.1\n");
    site.faust("deps-static", json!({}), &probe_plugin(Some("return [\"ctxhost_faust_probe==0.1\"]")));
    site.faust("deps-unfindable", json!({}), &probe_plugin(None));
    write(&site.plugin_dir("deps-unfindable").join("requirements.txt"), "ctxhost_not_in_any_index==1.0\n");
    // `ctxhost plugin deps <id>` installs one plugin's dependencies; this
    // operator lets starts install them all.
    write(&site.home().join("config.toml"), "[faustbot]\ninstall_deps_at_start = true\n");
    let started = Instant::now();
    let d = site.start(&[("PIP_NO_INDEX", "1"), ("PIP_FIND_LINKS", wheels.to_str().unwrap())]);
    let start_ms = started.elapsed().as_millis();

    for id in ["deps-req", "deps-static"] {
        let venv = site.home().join("venvs").join(id);
        assert_eq!(
            ask(&d, id, json!({})),
            json!({"value": "from-the-venv", "prefix": venv.to_str().unwrap()}),
            "{id} imported its dependency from its own venv"
        );
    }
    // The system python cannot import it: it is in the venvs only.
    let system = std::process::Command::new("python3").args(["-c", "import ctxhost_faust_probe"]).output().unwrap();
    assert!(!system.status.success());
    assert!(String::from_utf8_lossy(&system.stderr).contains("No module named 'ctxhost_faust_probe'"));
    // A requirement pip cannot find leaves that plugin out, with pip's reason (in the log).
    assert_eq!(communicate(&d, "deps-unfindable", json!({})).status, 404);
    let all = agent_plugins(&d);
    let (ok, stderr) = d.stop();
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("plugin 'deps-unfindable' is left out of the agent loop: its dependencies:")
            && stderr.contains("ctxhost_not_in_any_index"),
        "{stderr}"
    );

    // A second start finds the environments ready (no pip run).
    std::fs::remove_dir_all(site.plugin_dir("deps-unfindable")).unwrap();
    let again = Instant::now();
    let d = site.start(&[("PIP_NO_INDEX", "1"), ("PIP_FIND_LINKS", wheels.to_str().unwrap())]);
    let restart_ms = again.elapsed().as_millis();
    assert_eq!(ask(&d, "deps-static", json!({}))["value"], "from-the-venv");
    assert!(d.stop().0);
    eprintln!("faustbot deps: first start (two venvs built) {start_ms} ms, second start {restart_ms} ms");
    // The plugin pip failed for is listed with its error, as a plugin failing to start is.
    let failed = all.iter().find(|p| p["name"] == "deps-unfindable");
    let failed = failed.unwrap_or_else(|| panic!("deps-unfindable is not listed in GET /api/agent/plugins: {all:?}"));
    assert!(failed["error"].as_str().unwrap_or("").contains("ctxhost_not_in_any_index"), "{failed}");
}

#[test]
fn a_faustbot_plugin_gets_the_network_only_from_the_operators_grant() {
    let site = Site::new();
    site.faust(
        "net",
        json!({}),
        "import os\nfrom faust_backend.plugin_system import FaustPlugin\n\n\
         class Plugin(FaustPlugin):\n    def communicate_handler(self, payload, ctx):\n        \
         return {\"sandbox\": os.environ.get(\"LIBREFANG_SANDBOX\")}\n",
    );
    let d = site.start(&[]);
    assert_eq!(ask(&d, "net", json!({}))["sandbox"], "1", "no network by default");
    assert!(d.stop().0);
    site.ctxhost(&["plugin", "grant", "net", "--network"]);
    let grants = std::fs::read_to_string(site.home().join("grants.toml")).unwrap();
    assert!(grants.contains("allow_network = true"), "{grants}");
    let d = site.start(&[]);
    assert_eq!(ask(&d, "net", json!({}))["sandbox"], Value::Null, "granted");
    assert!(d.stop().0);
}

#[test]
fn doctor_and_plugin_list_know_faustbot_plugins() {
    let site = Site::new();
    site.example("faustbot/calculator");
    let out = crate::util::ctxhost().arg("--home").arg(site.home()).args(["doctor", "--json"]).assert().success();
    let report: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    let calc = &report["plugins"][0];
    assert_eq!(
        (&calc["name"], &calc["runtime"], &calc["hooks_valid"]),
        (&json!("calculator"), &json!("python"), &json!(true))
    );
    assert!(calc["error"].is_null(), "{calc}");
    let out =
        crate::util::ctxhost().arg("--home").arg(site.home()).args(["plugin", "list", "--json"]).assert().success();
    let list: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!((&list[0]["name"], &list[0]["enabled"]), (&json!("calculator"), &json!(true)));
    assert!(list[0].get("error").is_none(), "{list}");
}

#[test]
fn watch_reloads_a_faustbot_plugin_when_its_code_changes() {
    let site = Site::new();
    let version = |v: &str| {
        format!(
            "from faust_backend.plugin_system import FaustPlugin\n\n\
             class Plugin(FaustPlugin):\n    def communicate_handler(self, payload, ctx):\n        \
             return {{\"version\": \"{v}\"}}\n"
        )
    };
    site.faust("live", json!({}), &version("v1"));
    let d = Daemon::start(site.home(), &["--watch"], &[]);
    assert_eq!(ask(&d, "live", json!({}))["version"], "v1");
    write(&site.plugin_dir("live").join("impl.py"), &version("v2"));
    within(10, "the reload after impl.py changed", || ask(&d, "live", json!({}))["version"] == "v2");
    assert!(d.stop().0);
}

#[test]
fn plugins_calling_each_other_through_trigger_chains_do_not_deadlock() {
    let site = Site::new();
    site.faust(
        "alpha",
        json!({}),
        "from faust_backend.plugin_system import FaustPlugin, hookimpl\n\n\
         class Plugin(FaustPlugin):\n\
         \x20   async def startup(self, ctx):\n\
         \x20       self.ctx = ctx\n\
         \x20       await ctx.trigger_create({\"id\": \"alpha-start\", \"type\": \"interval\", \"interval_seconds\": 3600})\n\n\
         \x20   @hookimpl\n\
         \x20   def trigger_append(self, payload, ctx):\n\
         \x20       payload[\"seen_by_alpha\"] = True\n\
         \x20       return payload\n\n\
         \x20   async def communicate_handler(self, payload, ctx):\n\
         \x20       await self.ctx.trigger_create({\"id\": \"alpha-made\", \"type\": \"interval\", \"interval_seconds\": 3600})\n\
         \x20       return {\"ok\": True}\n",
    );
    site.faust(
        "beta",
        json!({}),
        "from faust_backend.plugin_system import FaustPlugin, hookimpl\n\n\
         class Plugin(FaustPlugin):\n\
         \x20   async def startup(self, ctx):\n\
         \x20       self.ctx = ctx\n\
         \x20       await ctx.trigger_create({\"id\": \"beta-start\", \"type\": \"interval\", \"interval_seconds\": 3600})\n\n\
         \x20   @hookimpl\n\
         \x20   async def trigger_append(self, payload, ctx):\n\
         \x20       if payload[\"id\"] == \"alpha-made\":\n\
         \x20           await self.ctx.trigger_create({\"id\": \"beta-echo\", \"type\": \"interval\", \"interval_seconds\": 3600})\n\
         \x20       payload[\"seen_by_beta\"] = True\n\
         \x20       return payload\n",
    );
    let started = Instant::now();
    let d = site.start(&[]);
    assert!(started.elapsed() < Duration::from_secs(10), "both started at once: {:?}", started.elapsed());
    let started = Instant::now();
    // alpha → trigger_append chain → beta → trigger.create → chain: alpha is
    // busy in this very call, so it is skipped rather than waited for.
    assert_eq!(ask(&d, "alpha", json!({})), json!({"ok": true}));
    assert!(started.elapsed() < Duration::from_secs(5), "no deadlock: {:?}", started.elapsed());
    let get = |id: &str| d.get(&format!("/api/triggers/{id}")).json();
    assert_eq!(get("alpha-made")["seen_by_beta"], true);
    assert!(get("beta-echo")["seen_by_alpha"].is_null(), "{}", get("beta-echo"));
    assert_eq!(get("alpha-start")["id"], "alpha-start");
    assert_eq!(get("beta-start")["seen_by_alpha"], true, "alpha registered first and saw beta's");
    assert!(d.stop().0);
}
