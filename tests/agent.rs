//! The agent loop (`agent-hooks.md`) through `ctxhost serve`'s routes
//! (in-process: `Site::routes`; the token over the wire with the real daemon)
//! and `ctxhost run`: the guard plugin written three ways passing one test
//! set, every combine rule with real plugins, config_changed, triggers,
//! schedules, communicate, and services surviving a restart.

use std::time::Duration;

use serde_json::{Value, json};

use crate::util::http::{Client, Daemon};
use crate::util::site::Site;
use crate::util::within;
use crate::util::write;

impl Site {
    /// A python one-shot plugin: `hooks` are `(hook, body)`; each body runs
    /// with `req` (the request), `here` (the plugin dir) and `log(line)`
    /// (appends a JSON line to `<plugin>/log.jsonl` in one `O_APPEND` write,
    /// so processes of several instances logging at once never interleave)
    /// defined, and prints `reply`.
    pub(crate) fn python(&self, name: &str, manifest: &str, hooks: &[(&str, &str)]) {
        let dir = self.plugin_dir(name);
        let mut toml = format!("name = \"{name}\"\nversion = \"0.1.0\"\n{manifest}\n[hooks]\nruntime = \"python\"\n");
        for (hook, body) in hooks {
            toml.push_str(&format!("{hook} = \"hooks/{hook}.py\"\n"));
            let indented: String = body.lines().map(|l| format!("    {l}\n")).collect();
            write(
                &dir.join(format!("hooks/{hook}.py")),
                &format!(
                    "import json, os, sys, time\n\
                     here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))\n\
                     def log(line):\n    fd = os.open(os.path.join(here, 'log.jsonl'), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)\n    os.write(fd, (json.dumps(line) + '\\n').encode())\n    os.close(fd)\n\
                     req = json.load(sys.stdin)\nreply = {{}}\nif True:\n{indented}\
                     print(json.dumps(reply))\n"
                ),
            );
        }
        write(&dir.join("plugin.toml"), &toml);
    }
}

/// A tool plugin registering `shell_exec`, logging every real call.
fn shell_tool(site: &Site) {
    site.python(
        "shell",
        "prompt_suffix = \"Use shell_exec for commands.\"\nfrontend = { js = [\"panel.js\"] }\n\
         [[tools]]\nname = \"shell_exec\"\ndescription = \"Run a command\"\n\
         parameters = { type = \"object\", properties = { command = { type = \"string\" } }, required = [\"command\"] }\n",
        &[("call_tool", "log(req)\nreply = {'result': 'ran ' + req['args']['command']}")],
    );
}

/// The shared test set of the guard plugin (`guest-examples/guard*`).
fn guard_set(example: &str) {
    let site = Site::new();
    site.example(example);
    shell_tool(&site);
    let d = site.routes();
    let pre = |command: &str, tool: &str| {
        d.post(
            "/api/agent-hooks/tool_call_pre",
            &json!({"agent_id": "a1", "name": tool, "args": {"command": command}}).to_string(),
        )
    };

    // rm -rf in a shell_exec call is blocked, with the plugin and the reason.
    let r = pre("rm -rf /tmp/x", "shell_exec");
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.json(), json!({"blocked": "guard: refusing a command containing `rm -rf`", "plugin": example}));
    // Anything else passes with its args untouched.
    let r = pre("ls -la", "shell_exec");
    assert_eq!((r.status, r.json()), (200, json!({"value": {"command": "ls -la"}})));
    let r = pre("rm -rf /", "read_file");
    assert_eq!(r.status, 200, "only shell_exec is guarded: {}", r.body);

    // Memory writes lose their email addresses.
    let r = d.post(
        "/api/agent-hooks/memory_write_pre",
        r#"{"content":"mail ann.lee+x@mail.example.org or bob@test.io, not me@localhost","metadata":{"k":1}}"#,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["value"], "mail [email] or [email], not me@localhost");
    let r = d.post("/api/agent-hooks/memory_write_pre", r#"{"content":"no address here","metadata":{}}"#);
    assert_eq!(r.json()["value"], "no address here");

    // A denied tool is never called; an allowed one is, once.
    let r = d.post("/api/agents/a1/tools/shell_exec", r#"{"args":{"command":"rm -rf ~"}}"#);
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.json()["blocked"], "guard: refusing a command containing `rm -rf`");
    let r = d.post("/api/agents/a1/tools/shell_exec", r#"{"args":{"command":"echo hi"}}"#);
    assert_eq!((r.status, r.json()), (200, json!({"result": "ran echo hi"})));
    let calls = site.log("shell");
    assert_eq!(calls.len(), 1, "the blocked call never reached the tool: {calls:?}");
    assert_eq!(calls[0]["args"], json!({"command": "echo hi"}));

    // The pattern is config: a change takes effect on the next call.
    let config = d.get(&format!("/api/plugins/{example}/config"));
    assert_eq!(config.status, 200, "{}", config.body);
    assert_eq!(config.json()["values"], json!({"BLOCK_PATTERN": "rm -rf"}));
    assert_eq!(config.json()["schema"][0]["key"], "BLOCK_PATTERN");
    let put =
        d.send("PUT", &format!("/api/plugins/{example}/config"), Some(r#"{"values":{"BLOCK_PATTERN":"drop table"}}"#));
    assert_eq!((put.status, put.json()), (200, json!({"values": {"BLOCK_PATTERN": "drop table"}})));
    assert_eq!(pre("rm -rf /tmp/x", "shell_exec").status, 200);
    let r = pre("psql -c 'drop table users'", "shell_exec");
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.json()["blocked"], "guard: refusing a command containing `drop table`");
    let bad = d.send("PUT", &format!("/api/plugins/{example}/config"), Some(r#"{"values":{"BLOCK_PATERN":"x"}}"#));
    assert_eq!(bad.status, 400);
    assert!(bad.json()["error"].as_str().unwrap().contains("BLOCK_PATERN"), "{}", bad.body);
    d.stop();
}

#[test]
fn guard_as_a_python_worker_passes_the_guard_set() {
    guard_set("guard-python");
}

#[test]
fn guard_as_a_node_one_shot_script_passes_the_guard_set() {
    guard_set("guard-node");
}

#[test]
fn guard_as_a_rust_component_passes_the_guard_set() {
    guard_set("guard");
}

#[test]
fn message_chain_runs_in_priority_order_isolates_a_failing_plugin_and_blocks() {
    let site = Site::new();
    // plugin.toml: larger priority first; ties by name.
    let tag = |t: &str| format!("reply = {{'action': 'replace', 'value': req['text'] + ' [{t}]'}}");
    site.python("b-mid", "priority = 5", &[("message_received", &tag("b"))]);
    site.python("a-mid", "priority = 5", &[("message_received", &tag("a"))]);
    site.python("high", "priority = 10", &[("message_received", &tag("high"))]);
    site.python("crash", "priority = 7", &[("message_received", "sys.exit(3)")]);
    site.python("junk", "priority = 6", &[("message_received", "reply = {'action': 'explode'}")]);
    // FaustBot's string forms: a bare string replaces, __IGNORED__ drops.
    site.python(
        "last",
        "priority = -1",
        &[("message_received", "reply = '__IGNORED__' if 'spam' in req['text'] else req['text'] + '!'")],
    );
    let d = site.routes();
    let r = d.post("/api/agents/a1/messages", r#"{"text":"hello"}"#);
    assert_eq!((r.status, r.json()), (200, json!({"text": "hello [high] [a] [b]!"})), "{}", r.body);
    let r = d.post("/api/agents/a1/messages", r#"{"text":"buy spam","origin":"trigger_background"}"#);
    assert_eq!(r.json(), json!({"blocked": true, "plugin": "last", "reason": "ignored by the plugin"}));
    let r = d.post("/api/agents/a1/messages", r#"{"text":"x","origin":"nowhere"}"#);
    assert_eq!(r.status, 400);
    // The failures were counted, and the chain went on.
    let metrics = d.get("/metrics").body;
    let failed = |plugin: &str| {
        metrics.lines().any(|l| {
            l.starts_with("ctxhost_hook_failures_total")
                && l.contains(&format!("plugin=\"{plugin}\""))
                && l.contains("hook=\"message_received\"")
                && !l.ends_with(" 0")
        })
    };
    assert!(failed("crash") && failed("junk"), "{metrics}");
    d.stop();
}

#[test]
fn a_block_stops_the_chain_before_later_plugins() {
    let site = Site::new();
    site.python(
        "first",
        "priority = 2",
        &[("tool_call_pre", "reply = {'action': 'replace', 'value': {'command': req['args']['command'] + ' --safe'}}")],
    );
    site.python(
        "second",
        "priority = 1",
        &[("tool_call_pre", "reply = {'action': 'block', 'reason': req['args']['command']}")],
    );
    site.python("third", "priority = 0", &[("tool_call_pre", "log(req)")]);
    let d = site.routes();
    let r = d.post("/api/agent-hooks/tool_call_pre", r#"{"name":"x","args":{"command":"go"}}"#);
    assert_eq!((r.status, r.json()), (403, json!({"blocked": "go --safe", "plugin": "second"})));
    assert!(site.log("third").is_empty(), "nothing runs after a block");
    d.stop();
}

#[test]
fn config_changed_fires_for_every_set_and_config_survives_a_restart() {
    let site = Site::new();
    site.python(
        "watcher",
        "[agent_config]\nLIMIT = { type = \"int\", label = \"Limit\", default = 3 }\nNAME = { type = \"str\", default = \"x\" }\n",
        &[("config_changed", "log(req)")],
    );
    let d = site.routes();
    let path = "/api/plugins/watcher/config";
    assert_eq!(d.get(path).json()["values"], json!({"LIMIT": 3, "NAME": "x"}));
    let r = d.send("PUT", path, Some(r#"{"values":{"LIMIT":"7"}}"#));
    assert_eq!((r.status, r.json()), (200, json!({"values": {"LIMIT": 7, "NAME": "x"}})), "coerced");
    let r = d.send("PUT", path, Some(r#"{"values":{"LIMIT":7}}"#));
    assert_eq!(r.status, 200);
    let r = d.send("PUT", path, Some(r#"{"values":{"LIMIT":"seven","NAME":"y"}}"#));
    assert_eq!(r.status, 400);
    let error = r.json()["error"].as_str().unwrap().to_owned();
    assert!(error.contains("LIMIT") && error.contains("int"), "{error}");
    within(10, "two config_changed calls", || site.log("watcher").len() >= 2);
    std::thread::sleep(Duration::from_millis(300));
    let calls = site.log("watcher");
    assert_eq!(calls.len(), 2, "a refused PUT changes nothing and fires nothing: {calls:?}");
    assert_eq!((&calls[0]["key"], &calls[0]["old"], &calls[0]["new"]), (&json!("LIMIT"), &json!(3), &json!(7)));
    assert_eq!((&calls[1]["old"], &calls[1]["new"]), (&json!(7), &json!(7)), "every set fires, even an unchanged one");
    d.stop();
    let d = site.routes();
    assert_eq!(d.get(path).json()["values"], json!({"LIMIT": 7, "NAME": "x"}), "persisted");
    assert_eq!(d.get("/api/plugins/nope/config").status, 404);
    d.stop();
}

#[test]
fn triggers_fire_expire_merge_and_survive_a_restart() {
    let site = Site::new();
    site.python(
        "filter",
        "",
        &[
            (
                "trigger_append",
                "t = req['trigger']\nif t['id'] == 'spam':\n    reply = {'action': 'block', 'reason': 'no spam'}\nelse:\n    t['checked'] = True\n    reply = {'action': 'replace', 'value': t}",
            ),
            (
                "trigger_fire",
                "log(req['trigger']['id'])\nif req['trigger'].get('payload', {}).get('mute'):\n    reply = {'action': 'block', 'reason': 'muted'}",
            ),
        ],
    );
    let d = site.routes();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let post = |t: Value| d.post("/api/triggers", &t.to_string());
    let r = post(json!({"id": "spam", "type": "interval", "interval_seconds": 1}));
    assert_eq!((r.status, r.json()["blocked"].clone()), (403, json!("no spam")));
    let r = post(json!({"id": "tick", "type": "interval", "interval_seconds": 1, "payload": {"n": 1}, "priority": 2}));
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.json()["checked"], true, "trigger_append's replacement is what is stored");
    post(json!({"id": "muted", "type": "interval", "interval_seconds": 1, "payload": {"mute": true}}));
    post(json!({"id": "short", "type": "datetime", "target": now + 3600, "lifespan": 1}));
    post(json!({"id": "later", "type": "datetime", "target": now + 3600}));
    within(10, "tick to fire", || {
        d.get("/api/triggers/fired").json().as_array().unwrap().iter().any(|t| t["id"] == "tick")
    });
    within(10, "short to expire", || d.get("/api/triggers/short").status == 404);
    let fired = d.get("/api/triggers/fired").json();
    let ids: Vec<&str> = fired.as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap()).collect();
    assert!(!ids.contains(&"muted"), "trigger_fire blocked it: {ids:?}");
    assert!(!ids.contains(&"short"), "an expired trigger never fires: {ids:?}");
    within(10, "muted to reach trigger_fire", || site.log("filter").contains(&json!("muted")));

    // PATCH merges: the type and interval stay, the payload is merged.
    let r = d.send("PATCH", "/api/triggers/tick", Some(r#"{"payload":{"m":2},"recall_description":"tick tock"}"#));
    assert_eq!(r.status, 200, "{}", r.body);
    let t = r.json();
    assert_eq!(
        (&t["type"], &t["interval_seconds"], &t["payload"]),
        (&json!("interval"), &json!(1), &json!({"n": 1, "m": 2}))
    );
    let r = d.send("PATCH", "/api/triggers/tick", Some(r#"{"type":"sometimes"}"#));
    assert_eq!(r.status, 400, "a patch that breaks the trigger is refused: {}", r.body);
    assert_eq!(d.send("DELETE", "/api/triggers/muted", None).status, 200);
    assert_eq!(d.send("DELETE", "/api/triggers/muted", None).status, 404);
    let list = d.get("/api/triggers").json();
    assert_eq!(list[0]["id"], "tick", "highest priority first: {list}");
    d.stop();

    let d = site.routes();
    let ids: Vec<Value> = d.get("/api/triggers").json().as_array().unwrap().iter().map(|t| t["id"].clone()).collect();
    assert_eq!(ids, [json!("tick"), json!("later")], "persisted across a restart");
    d.stop();
}

#[test]
fn event_triggers_fire_with_their_payload() {
    let site = Site::new();
    let d = site.routes();
    let r =
        d.post("/api/triggers", r#"{"id":"on-deploy","type":"event","event_name":"deploy","recall_description":"x"}"#);
    assert_eq!(r.status, 201, "{}", r.body);
    let r = d.post("/api/events/deploy", r#"{"version":"1.2"}"#);
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["fired"][0]["id"], "on-deploy");
    assert_eq!(r.json()["fired"][0]["event_payload"], json!({"version": "1.2"}));
    assert_eq!(d.post("/api/events/other", "{}").json()["fired"], json!([]));
    d.stop();
}

#[test]
fn schedules_never_overlap_and_heartbeats_come() {
    let site = Site::new();
    site.python(
        "ticker",
        "heartbeat_secs = 0.2\n[[schedules]]\nid = \"slow\"\ninterval_secs = 0.2\n",
        &[
            ("run_schedule", "log({'at': 'start', 'id': req['id']})\ntime.sleep(0.6)\nlog({'at': 'end'})"),
            ("heartbeat", "log({'at': 'beat'})"),
        ],
    );
    let d = site.routes();
    within(10, "three schedule runs", || site.log("ticker").iter().filter(|l| l["at"] == "end").count() >= 3);
    d.stop();
    let runs: Vec<Value> = site.log("ticker").into_iter().filter(|l| l["at"] != "beat").collect();
    for pair in runs.chunks(2) {
        assert_eq!(pair[0], json!({"at": "start", "id": "slow"}), "no run starts before the last ended: {runs:?}");
        if pair.len() == 2 {
            assert_eq!(pair[1]["at"], "end", "{runs:?}");
        }
    }
    assert!(site.log("ticker").iter().filter(|l| l["at"] == "beat").count() >= 3);
}

#[test]
fn communicate_routes_by_id_with_faustbots_statuses() {
    let site = Site::new();
    site.python(
        "talker",
        "",
        &[("communicate", "reply = [1, 2] if req['payload'].get('bad') else {'echo': req['payload']}")],
    );
    site.python("mute", "", &[("tool_call_pre", "pass")]);
    let d = site.routes();
    let r = d.post("/faust/plugins/talker/communicate", r#"{"q":1}"#);
    assert_eq!((r.status, r.json()), (200, json!({"echo": {"q": 1}})));
    assert_eq!(d.post("/faust/plugins/talker/communicate", r#"{"bad":true}"#).status, 400);
    assert_eq!(d.post("/faust/plugins/nobody/communicate", "{}").status, 404);
    assert_eq!(d.post("/faust/plugins/mute/communicate", "{}").status, 400, "no communicate hook");
    crate::util::ctxhost().arg("--home").arg(site.home()).args(["plugin", "disable", "talker"]).assert().success();
    let r = d.post("/faust/plugins/talker/communicate", r#"{"q":1}"#);
    assert_eq!(r.status, 503, "{}", r.body);
    d.stop();
}

#[test]
fn tools_are_listed_and_a_run_transcript_goes_through_the_loop() {
    let site = Site::new();
    shell_tool(&site);
    site.example("guard-node");
    let d = site.routes();
    let tools = d.get("/api/tools").json();
    assert_eq!(tools[0]["plugin"], "shell");
    assert_eq!(tools[0]["name"], "shell_exec");
    assert_eq!(tools[0]["parameters"]["required"], json!(["command"]));
    assert_eq!(d.post("/api/agents/a1/tools/shel_exec", "{}").status, 404);
    let plugins = d.get("/api/agent/plugins").json();
    let names: Vec<&str> = plugins.as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["guard-node", "shell"], "chain order (equal priority: by name)");
    assert_eq!(plugins[1]["tools"], json!(["shell_exec"]));
    assert_eq!(plugins[1]["frontend"], json!({"js": ["panel.js"], "css": []}));
    let assembled = d.post(
        "/api/agents/a1/assemble",
        r#"{"system_prompt":"Be brief.","messages":[{"role":"user","content":"hi"}]}"#,
    );
    assert_eq!(assembled.json()["system_prompt"], "Be brief.\n\nUse shell_exec for commands.", "{}", assembled.body);
    d.stop();

    let transcript = site.home().join("t.jsonl");
    write(
        &transcript,
        "{\"user\":\"clean up\",\"assistant\":\"done\",\"tools\":[{\"name\":\"shell_exec\",\"input\":{\"command\":\"rm -rf /\"}},{\"name\":\"shell_exec\",\"input\":{\"command\":\"ls\"}},{\"name\":\"shell_exec\",\"input\":{\"command\":\"rm -rf x\"},\"result\":\"given\"}]}\n",
    );
    let out = crate::util::ctxhost()
        .arg("--home")
        .arg(site.home())
        .args(["run", "--json", "--transcript"])
        .arg(&transcript)
        .assert()
        .success();
    // After the run's own line, the first turn.
    let first: Value =
        serde_json::from_str(String::from_utf8_lossy(&out.get_output().stdout).lines().nth(1).unwrap()).unwrap();
    let results = first["tool_results"].as_array().unwrap();
    assert!(
        results[0].as_str().unwrap().starts_with("tool call denied by plugin 'guard-node': guard: refusing"),
        "{first}"
    );
    assert_eq!(results[1], "ran ls", "{first}");
    assert!(results[2].as_str().unwrap().contains("denied"), "a given result is denied too: {first}");
    let system = &first["assembled"][0];
    assert!(system["content"].as_str().unwrap().ends_with("Use shell_exec for commands."), "{system}");
    let calls = site.log("shell");
    assert_eq!(calls.len(), 1, "only `ls` reached the tool: {calls:?}");
}

/// A python JSON-RPC worker plugin whose `communicate` runs the service
/// calls it is given (`{"calls": [[method, params], …]}` → `{"results": […]}`)
/// and whose symbolic vfs nodes say how often they were computed.
pub(crate) fn service_worker(site: &Site, name: &str) {
    let dir = site.plugin_dir(name);
    std::fs::create_dir_all(dir.join("hooks")).unwrap();
    std::fs::copy(
        crate::util::examples::repo_root().join("guest-examples/rpc-clients/ctxhost_rpc.py"),
        dir.join("hooks/ctxhost_rpc.py"),
    )
    .unwrap();
    write(
        &dir.join("hooks/worker.py"),
        "from ctxhost_rpc import host, RpcError\n\
         reads = [0]\n\
         @host.hook('communicate')\n\
         def communicate(req):\n\
         \x20   out = []\n\
         \x20   for method, params in req['payload']['calls']:\n\
         \x20       try:\n\
         \x20           out.append({'ok': host.call(method, params)})\n\
         \x20       except RpcError as e:\n\
         \x20           out.append({'err': e.message})\n\
         \x20   return {'results': out}\n\
         @host.hook('read_symbolic')\n\
         def read_symbolic(req):\n\
         \x20   reads[0] += 1\n\
         \x20   return {'content': '%s read %d' % (req['path'], reads[0])}\n\
         host.run()\n",
    );
    write(
        &dir.join("plugin.toml"),
        &format!(
            "name = \"{name}\"\nversion = \"0.1.0\"\n[hooks]\nruntime = \"python\"\npersistent_subprocess = true\n\
             worker_protocol = \"jsonrpc\"\ncommunicate = \"hooks/worker.py\"\nread_symbolic = \"hooks/worker.py\"\n"
        ),
    );
}

pub(crate) fn calls(d: &impl Client, plugin: &str, calls: Value) -> Vec<Value> {
    let r = d.post(&format!("/faust/plugins/{plugin}/communicate"), &json!({"calls": calls}).to_string());
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()["results"].as_array().unwrap().clone()
}

#[test]
fn vfs_paths_are_normalised_symbolic_nodes_computed_and_services_survive_a_restart() {
    let site = Site::new();
    service_worker(&site, "notes");
    service_worker(&site, "reader");
    let d = site.routes();
    let out = calls(
        &d,
        "notes",
        json!([
            ["vfs.write", {"path": "plugins\\notes\\.\\a\\..\\b.txt", "content": "bee"}],
            ["vfs.write_symbolic", {"path": "/plugins/notes/live", "searchable": true}],
            ["vfs.write", {"path": "/plugins/reader/x", "content": "not mine"}],
            ["vfs.write", {"path": "/../../plugins/notes/deep/c.txt", "content": "sea"}],
            ["storage.set", {"key": "k", "value": {"n": 1}}],
            ["storage.set", {"key": "k", "value": "a1's", "scope": "session", "agent_id": "a1"}],
            ["storage.get", {"key": "k", "scope": "session", "agent_id": "a2"}],
            ["storage.set", {"key": "k", "value": 1, "scope": "session"}],
        ]),
    );
    assert_eq!(out[0], json!({"ok": "/plugins/notes/b.txt"}), "`\\` → `/`, `.` dropped, `..` resolved: {out:?}");
    assert_eq!(out[1], json!({"ok": "/plugins/notes/live"}));
    assert!(out[2]["err"].as_str().unwrap().contains("may only write below /plugins/notes"), "{out:?}");
    assert_eq!(out[3], json!({"ok": "/plugins/notes/deep/c.txt"}), "`..` clamped at the root");
    assert_eq!(out[6], json!({"ok": null}), "another agent's session is empty");
    assert!(out[7]["err"].as_str().unwrap().contains("session"), "no agent, no session scope: {out:?}");

    let vfs = |path: &str| d.get(&format!("/api/vfs?path={path}"));
    assert_eq!(vfs("/plugins/notes/b.txt").json(), json!({"path": "/plugins/notes/b.txt", "content": "bee"}));
    // Each child's kind: the dashboard marks symbolic nodes and their owner.
    assert_eq!(
        vfs("/plugins/notes").json(),
        json!({"path": "/plugins/notes", "children": ["b.txt", "deep", "live"], "entries": [
            {"name": "b.txt", "kind": "file"},
            {"name": "deep", "kind": "dir"},
            {"name": "live", "kind": "symbolic", "owner": "notes"},
        ]})
    );
    let live = vfs("/plugins/notes/live").json();
    assert_eq!(live["content"], "/plugins/notes/live read 1", "computed by its owner");
    assert_eq!((&live["symbolic"], &live["owner"]), (&json!(true), &json!("notes")), "{live}");
    assert_eq!(vfs("/plugins/notes/live").json()["content"], "/plugins/notes/live read 2", "on every read");
    assert_eq!(vfs("/nothing/here").status, 404);
    // Another plugin reads it through the host, which asks the owner.
    let out = calls(
        &d,
        "reader",
        json!([
            ["vfs.read", {"path": "/plugins/notes/live"}],
            ["vfs.read", {"path": "/plugins/notes/missing", "default": "dflt"}],
            ["vfs.list", {"path": "/plugins"}],
            ["storage.get", {"key": "k"}],
        ]),
    );
    assert_eq!(out[0], json!({"ok": "/plugins/notes/live read 3"}));
    assert_eq!(out[1], json!({"ok": "dflt"}));
    assert_eq!(out[2], json!({"ok": ["notes"]}));
    assert_eq!(out[3], json!({"ok": null}), "storage is per plugin");
    d.stop();

    let d = site.routes();
    let out = calls(
        &d,
        "notes",
        json!([
            ["vfs.read", {"path": "/plugins/notes/deep/c.txt"}],
            ["storage.get", {"key": "k"}],
            ["storage.get", {"key": "k", "scope": "session", "agent_id": "a1"}],
            ["vfs.delete", {"path": "/plugins/notes/deep"}],
            ["vfs.delete", {"path": "/plugins/notes/deep"}],
        ]),
    );
    assert_eq!(out[..3], [json!({"ok": "sea"}), json!({"ok": {"n": 1}}), json!({"ok": "a1's"})], "after a restart");
    assert_eq!(out[3..], [json!({"ok": true}), json!({"ok": false})]);
    assert_eq!(d.get("/api/vfs?path=/plugins/notes/deep/c.txt").status, 404, "the subtree went");
    d.stop();
}

#[test]
fn reloading_an_agent_plugin_swaps_it_and_disabling_takes_it_out() {
    let site = Site::new();
    let v = |tag: &str| format!("reply = {{'action': 'replace', 'value': req['text'] + ' {tag}'}}");
    site.python("tagger", "", &[("message_received", &v("v1"))]);
    let d = site.routes();
    let say = || d.post("/api/agents/a1/messages", r#"{"text":"hi"}"#).json()["text"].clone();
    assert_eq!(say(), "hi v1");
    site.python("tagger", "version_note = 2", &[("message_received", &v("v2"))]);
    let r = d.post("/api/plugins/tagger/reload", "");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["active"], true);
    assert_eq!(say(), "hi v2");
    crate::util::ctxhost().arg("--home").arg(site.home()).args(["plugin", "disable", "tagger"]).assert().success();
    assert_eq!(d.post("/api/plugins/tagger/reload", "").status, 200);
    assert_eq!(say(), "hi", "out of the loop");
    d.stop();
}

#[test]
fn every_mutating_agent_route_needs_the_token() {
    let site = Site::new();
    site.python(
        "watcher",
        "[agent_config]\nLIMIT = { type = \"int\", default = 3 }\n",
        &[("config_changed", "log(req)")],
    );
    let d = Daemon::start(site.home(), &["--token", "s3cret"], &[]);
    for (method, path, body) in [
        ("POST", "/api/agents/a1/messages", r#"{"text":"x"}"#),
        ("POST", "/api/agents/a1/tools/t", "{}"),
        ("POST", "/api/agent-hooks/tool_call_pre", "{}"),
        ("PUT", "/api/plugins/watcher/config", r#"{"values":{"LIMIT":1}}"#),
        ("POST", "/api/triggers", r#"{"id":"t","type":"interval","interval_seconds":5}"#),
        ("PATCH", "/api/triggers/t", "{}"),
        ("DELETE", "/api/triggers/t", ""),
        ("POST", "/api/events/e", "{}"),
        ("POST", "/faust/plugins/watcher/communicate", "{}"),
    ] {
        assert_eq!(d.send(method, path, Some(body)).status, 401, "{method} {path}");
    }
    for path in ["/api/plugins/watcher/config", "/api/vfs?path=/", "/api/agent/health", "/faust/admin/plugins"] {
        assert_eq!(d.get(path).status, 401, "{path}: config values and plugin code need the token too");
    }
    assert_eq!(d.get("/api/triggers").json(), json!([]), "nothing changed");
    assert_eq!(d.get("/api/tools").status, 200, "other reads need no token");
    let r = crate::util::http::request(
        &d.addr,
        "PUT",
        "/api/plugins/watcher/config",
        Some(r#"{"values":{"LIMIT":1}}"#),
        &[("Authorization", "Bearer s3cret")],
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let r = crate::util::http::request(
        &d.addr,
        "GET",
        "/api/plugins/watcher/config",
        None,
        &[("Authorization", "Bearer s3cret")],
    );
    assert_eq!(r.json()["values"], json!({"LIMIT": 1}));
    assert!(d.stop().0);
}
