//! `ctxhost serve` as a client sees it. Every route with its error statuses,
//! reload and scaffold run through the daemon's routes in-process
//! (`Site::routes`, `server::Routes`: the same loading, no socket); what needs
//! the real binary on an ephemeral loopback port keeps it: concurrent
//! connections, hot reload under load, `--watch`, the token over the wire,
//! graceful shutdown on SIGTERM, and the stdlib Python agent of
//! guest-examples/ talking to it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};

use crate::util::http::{Client, Daemon};
use crate::util::routes::InProcess;
use crate::util::{repo_root, require_program, write};

/// A ctxhost home with bash plugins in its plugins dir.
struct Site {
    root: tempfile::TempDir,
}

impl Site {
    fn new() -> Site {
        Site { root: tempfile::tempdir().unwrap() }
    }

    fn home(&self) -> PathBuf {
        self.root.path().join("home")
    }

    fn plugin_dir(&self, name: &str) -> PathBuf {
        self.home().join("plugins").join(name)
    }

    fn config(&self, toml: &str) {
        write(&self.home().join("config.toml"), toml);
    }

    /// A bash plugin answering ingest with `"<name> <VERSION>: <message>"`
    /// (VERSION from its `[env]`, fixed at load: only a reload changes it),
    /// and after_turn with ok.
    fn echo_plugin(&self, name: &str, version: &str) {
        let manifest = format!(
            "name = \"{name}\"\nversion = \"1.0.0\"\n[env]\nVERSION = \"{version}\"\n\
             [hooks]\nruntime = \"bash\"\ningest = \"hooks/ingest.sh\"\nafter_turn = \"hooks/after_turn.sh\"\n"
        );
        write(&self.plugin_dir(name).join("plugin.toml"), &manifest);
        write(
            &self.plugin_dir(name).join("hooks/ingest.sh"),
            &format!(
                "read -r line\nprintf '{{\"memories\":[{{\"content\":\"{name} %s: %s\"}}]}}\\n' \"$VERSION\" \"$LIBREFANG_MESSAGE\"\n"
            ),
        );
        write(&self.plugin_dir(name).join("hooks/after_turn.sh"), "cat > /dev/null\necho '{\"type\":\"ok\"}'\n");
    }

    /// Gives the echo plugin `name` a new VERSION by replacing its manifest
    /// atomically (as a deployment would): calls running meanwhile never see
    /// a half-written file.
    fn set_version(&self, name: &str, version: &str) {
        let manifest = self.plugin_dir(name).join("plugin.toml");
        let text = std::fs::read_to_string(&manifest).unwrap();
        let start = text.find("VERSION = \"").unwrap() + "VERSION = \"".len();
        let end = start + text[start..].find('"').unwrap();
        let tmp = self.plugin_dir(name).join(".plugin.toml.tmp");
        std::fs::write(&tmp, format!("{}{version}{}", &text[..start], &text[end..])).unwrap();
        std::fs::rename(&tmp, &manifest).unwrap();
    }

    fn start(&self, args: &[&str]) -> Daemon {
        Daemon::start(&self.home(), args, &[])
    }

    /// The daemon's routes in-process, for tests of what a handler answers.
    fn routes(&self) -> InProcess {
        InProcess::start(&self.home())
    }
}

fn ingest(daemon: &impl Client, agent: &str, message: &str) -> Value {
    let r = daemon.post(&format!("/api/agents/{agent}/ingest"), &json!({ "message": message }).to_string());
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()
}

fn plugin_memories(reply: &Value) -> Vec<String> {
    reply["memories"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["source"] != "default")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn agent_api_answers_every_hook_with_the_engines_result() {
    let site = Site::new();
    site.echo_plugin("alpha", "v1");
    site.echo_plugin("beta", "v1");
    site.config(
        "[context_engine]\nplugin_stack = [\"alpha\", \"beta\"]\nplugin_stack_weights = { beta = 2.0 }\n\
         context_window_tokens = 1000\n",
    );
    let d = site.routes();

    let health = d.get("/healthz");
    assert_eq!(health.status, 200);
    assert_eq!(health.json(), json!({"status": "ok", "plugins": ["alpha", "beta"]}));

    // after_turn: the built-in memory stores what the user said.
    let turn = json!({"messages": [
        {"role": "user", "content": "my cat is called Tom"},
        {"role": "assistant", "content": "Nice name."}
    ]});
    let r = d.post("/api/agents/a1/after_turn", &turn.to_string());
    assert_eq!((r.status, r.json()), (200, json!({"type": "ok"})));

    // ingest: default recall first, then the layers by weight (beta 2.0 first).
    let reply = ingest(&d, "a1", "what is my cat called");
    let memories = reply["memories"].as_array().unwrap();
    assert_eq!(memories[0], json!({"content": "my cat is called Tom", "source": "default", "sources": ["default"]}));
    assert_eq!(
        memories[1..],
        [
            json!({"content": "beta v1: what is my cat called", "source": "beta", "sources": ["beta"]}),
            json!({"content": "alpha v1: what is my cat called", "source": "alpha", "sources": ["alpha"]})
        ]
    );
    // The route's agent is the key: another agent recalls nothing of a1's.
    let other = ingest(&d, "a2", "what is my cat called");
    assert!(other["memories"].as_array().unwrap().iter().all(|m| m["source"] != "default"), "{other}");

    // assemble: no plugin assembles, so the default trims to the window;
    // the newest user message always stays.
    let long = "word ".repeat(400);
    let history = json!({"system_prompt": "be brief", "messages": [
        {"role": "user", "content": long},
        {"role": "assistant", "content": long},
        {"role": "user", "content": "and now?"}
    ], "context_window_tokens": 600});
    let r = d.post("/api/agents/a1/assemble", &history.to_string());
    assert_eq!(r.status, 200, "{}", r.body);
    let messages = r.json()["messages"].as_array().unwrap().clone();
    assert_eq!(messages.last().unwrap()["content"], "and now?");
    assert!(messages.len() < 3, "trimmed to the window: {messages:?}");

    // compact without token_pressure: the host computes it.
    let r = d.post("/api/agents/a1/compact", &json!({"messages": history["messages"]}).to_string());
    assert_eq!(r.status, 200, "{}", r.body);
    let compacted = r.json();
    assert!(compacted["messages"].as_array().unwrap().len() <= 3, "{compacted}");

    // transform_tool_result: no plugin rewrites, the result stays.
    let r = d.post(
        "/api/agents/a1/transform_tool_result",
        &json!({"tool_name": "ls", "tool_use_id": "t1", "result": "a b c"}).to_string(),
    );
    assert_eq!((r.status, r.json()), (200, json!({"content": "a b c"})));

    for hook in ["bootstrap", "prepare_subagent", "merge_subagent"] {
        let r = d.post(&format!("/api/agents/a1/{hook}"), "{\"child_id\":\"c1\"}");
        assert_eq!((r.status, r.json()), (200, json!({"type": "ok"})), "{hook}");
    }
    // An empty body is an empty request.
    assert_eq!(d.post("/api/agents/a1/after_turn", "").status, 200);
}

#[test]
fn agent_api_ingest_merges_the_same_memory_from_the_built_in_store_and_two_plugins() {
    let site = Site::new();
    for name in ["alpha", "beta"] {
        write(
            &site.plugin_dir(name).join("plugin.toml"),
            &format!("name = \"{name}\"\nversion = \"1\"\n[hooks]\nruntime = \"bash\"\ningest = \"hooks/ingest.sh\"\n"),
        );
        // The built-in memory's text with other whitespace, and one of its own.
        write(
            &site.plugin_dir(name).join("hooks/ingest.sh"),
            &format!(
                "cat > /dev/null\necho '{{\"memories\":[{{\"content\":\"my cat is\\ncalled Tom \"}},{{\"content\":\"{name} only\"}}]}}'\n"
            ),
        );
    }
    site.config("[context_engine]\nplugin_stack = [\"alpha\", \"beta\"]\n");
    let d = site.routes();
    let turn = json!({"messages": [{"role": "user", "content": "my cat is called Tom"}]});
    assert_eq!(d.post("/api/agents/a1/after_turn", &turn.to_string()).status, 200);
    let reply = ingest(&d, "a1", "what is my cat called");
    assert_eq!(
        reply["memories"],
        json!([
            {"content": "my cat is called Tom", "source": "default", "sources": ["default", "alpha", "beta"]},
            {"content": "alpha only", "source": "alpha", "sources": ["alpha"]},
            {"content": "beta only", "source": "beta", "sources": ["beta"]},
        ])
    );
    // Without the built-in memory's copy, the first plugin's text stands.
    let reply = ingest(&d, "a2", "what is my cat called");
    assert_eq!(
        reply["memories"][0],
        json!({"content": "my cat is\ncalled Tom ", "source": "alpha", "sources": ["alpha", "beta"]})
    );
    d.stop();
}

#[test]
fn bad_requests_get_a_400_that_says_what_is_wrong() {
    let site = Site::new();
    site.echo_plugin("alpha", "v1");
    site.config("[context_engine]\nplugin = \"alpha\"\n");
    let d = site.routes();

    let r = d.post("/api/agents/a1/ingest", "{\"message\": ");
    assert_eq!(r.status, 400);
    assert!(r.json()["error"].as_str().unwrap().starts_with("the request body is not valid JSON: EOF"), "{}", r.body);
    assert_eq!(r.header("content-type"), Some("application/json"));

    let r = d.post("/api/agents/a1/ingest", "[1,2]");
    assert_eq!(
        (r.status, r.json()["error"].as_str()),
        (400, Some("the request body must be a JSON object, not an array"))
    );

    let r = d.post("/api/agents/a1/ingest", "{\"message\": 5}");
    assert_eq!(r.status, 400);
    assert!(r.json()["error"].as_str().unwrap().starts_with("invalid `ingest` request"), "{}", r.body);

    let r = d.post("/api/agents/a1/ingest", "{\"agent_id\": \"someone-else\"}");
    assert_eq!(r.status, 400);
    assert!(r.body.contains("the route's agent is \\\"a1\\\""), "{}", r.body);

    let r = d.post("/api/agents/a1/ingest", "{\"type\": \"assemble\"}");
    assert_eq!(r.status, 400, "{}", r.body);

    let r = d.post("/api/agents/a1/injest", "{}");
    assert_eq!(r.status, 404);
    assert!(r.json()["error"].as_str().unwrap().contains("did you mean `ingest`"), "{}", r.body);

    let r = d.post("/api/plugins/alpha/test-hook", "not json");
    assert_eq!(r.status, 400);
    assert!(r.json()["error"].as_str().unwrap().starts_with("the request body is not valid JSON"), "{}", r.body);

    let r = d.get("/no/such/route");
    assert_eq!((r.status, r.json()["error"].as_str()), (404, Some("no route for /no/such/route")));
    // A misspelt route names the nearest one, its parameters filled from the path.
    let r = d.get("/api/plugin");
    assert_eq!(
        (r.status, r.json()["error"].as_str()),
        (404, Some("no route for /api/plugin; did you mean `/api/plugins`?"))
    );
    let r = d.post("/api/plugins/alpha/relaod", "");
    assert_eq!(
        (r.status, r.json()["error"].as_str()),
        (404, Some("no route for /api/plugins/alpha/relaod; did you mean `/api/plugins/alpha/reload`?"))
    );
    let r = d.get("/metrix");
    assert!(r.json()["error"].as_str().unwrap().ends_with("did you mean `/metrics`?"), "{}", r.body);

    let r = d.get("/api/agents/a1/ingest");
    assert_eq!(r.status, 405, "a GET of a POST route");
}

#[test]
fn an_abort_plugin_failure_is_a_502_naming_the_plugin() {
    let site = Site::new();
    write(
        &site.plugin_dir("strict").join("plugin.toml"),
        "name = \"strict\"\nversion = \"1\"\n[hooks]\nruntime = \"bash\"\non_hook_failure = \"abort\"\ningest = \"i.sh\"\n",
    );
    write(&site.plugin_dir("strict").join("i.sh"), "echo broken >&2\nexit 3\n");
    site.config("[context_engine]\nplugin = \"strict\"\n");
    let d = site.routes();
    let r = d.post("/api/agents/a1/ingest", "{\"message\":\"hi\"}");
    assert_eq!(r.status, 502, "{}", r.body);
    let body = r.json();
    assert_eq!((body["plugin"].as_str(), body["hook"].as_str()), (Some("strict"), Some("ingest")));
    assert!(body["error"].as_str().unwrap().contains("exit code 3"), "{body}");
}

#[test]
fn concurrent_calls_all_answer() {
    let site = Site::new();
    site.echo_plugin("alpha", "v1");
    site.echo_plugin("beta", "v1");
    site.config("[context_engine]\nplugin_stack = [\"alpha\", \"beta\"]\n");
    let d = Arc::new(site.start(&[]));
    let handles: Vec<_> = (0..24)
        .map(|i| {
            let d = d.clone();
            std::thread::spawn(move || plugin_memories(&ingest(&*d, &format!("agent-{i}"), &format!("question {i}"))))
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        assert_eq!(h.join().unwrap(), [format!("alpha v1: question {i}"), format!("beta v1: question {i}")]);
    }
    let metrics = d.get("/api/context-engine/metrics").json();
    assert_eq!(metrics["ingest"]["calls"], 48);
    assert_eq!(metrics["ingest"]["failures"], 0);
}

#[test]
fn metrics_routes() {
    let site = Site::new();
    let d = site.routes();
    // No plugin active: LibreFang's 204.
    let r = d.get("/api/context-engine/metrics");
    assert_eq!((r.status, r.body.as_str()), (204, ""));
    drop(d);

    site.echo_plugin("alpha", "v1");
    site.config("[context_engine]\nplugin = \"alpha\"\n");
    let d = site.routes();
    assert_eq!(d.get("/api/context-engine/metrics").json(), json!({}), "active, nothing called yet");
    ingest(&d, "a1", "hello");
    let flat = d.get("/api/context-engine/metrics").json();
    assert_eq!((flat["ingest"]["calls"].as_u64(), flat["ingest"]["successes"].as_u64()), (Some(1), Some(1)));
    assert!(flat["ingest"]["total_ms"].as_f64().unwrap() > 0.0);

    let r = d.get("/metrics");
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").unwrap().starts_with("text/plain; version=0.0.4"));
    assert!(r.body.contains("ctxhost_hook_calls_total{plugin=\"alpha\",hook=\"ingest\"} 1\n"), "{}", r.body);
    assert!(r.body.contains("ctxhost_hook_duration_seconds_count{plugin=\"alpha\",hook=\"ingest\"} 1\n"));
    assert!(r.body.contains("ctxhost_plugin_active{plugin=\"alpha\"} 1\n"));
}

#[test]
fn test_hook_runs_one_plugin_hook_and_reports() {
    let site = Site::new();
    site.echo_plugin("alpha", "v1");
    write(
        &site.plugin_dir("broken").join("plugin.toml"),
        "name = \"broken\"\nversion = \"1\"\n[hooks]\nruntime = \"bash\"\ningest = \"i.sh\"\n",
    );
    write(&site.plugin_dir("broken").join("i.sh"), "echo 'no luck' >&2\nexit 2\n");
    let d = site.routes();

    // Not in any stack: the daemon's own load of it answers.
    let r = d.post(
        "/api/plugins/alpha/test-hook",
        &json!({"hook": "ingest", "input": {"agent_id": "a1", "message": "hi"}}).to_string(),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let body = r.json();
    assert_eq!(
        (body["hook"].as_str(), body["plugin"].as_str(), &body["success"]),
        (Some("ingest"), Some("alpha"), &json!(true))
    );
    assert_eq!(body["output"], json!({"memories": [{"content": "alpha v1: hi"}]}));
    assert!(body["elapsed_ms"].as_f64().unwrap() > 0.0);

    let r = d.post("/api/plugins/broken/test-hook", "{\"hook\":\"ingest\",\"input\":{}}");
    assert_eq!(r.status, 400);
    let body = r.json();
    assert_eq!(body["success"], false);
    assert!(body["error"].as_str().unwrap().contains("exit code 2"), "{body}");

    let r = d.post("/api/plugins/alpha/test-hook", "{\"hook\":\"ingets\"}");
    assert_eq!(r.status, 400);
    assert!(r.json()["error"].as_str().unwrap().contains("did you mean `ingest`"), "{}", r.body);
    let r = d.post("/api/plugins/alpha/test-hook", "{\"input\":{}}");
    assert_eq!((r.status, r.json()["error"].as_str()), (400, Some("`hook` is required")));
    let r = d.post("/api/plugins/alpha/test-hook", "{\"hook\":\"assemble\"}");
    assert_eq!(r.status, 400, "alpha has no assemble hook: {}", r.body);

    let r = d.post("/api/plugins/nobody/test-hook", "{\"hook\":\"ingest\"}");
    assert_eq!((r.status, r.json()["error"].as_str()), (404, Some("Plugin 'nobody' not found")));

    // A plugin written while the daemon runs is usable at once.
    site.echo_plugin("late", "v9");
    let r = d.post("/api/plugins/late/test-hook", "{\"hook\":\"ingest\",\"input\":{\"message\":\"yo\"}}");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["output"]["memories"][0]["content"], "late v9: yo");
    let r = d.post("/api/plugins/late/reload", "");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["active"], false, "not in the stack");
}

#[test]
fn doctor_route_has_librefangs_shape() {
    let site = Site::new();
    site.echo_plugin("alpha", "v1");
    let d = site.routes();
    let r = d.get("/api/plugins/doctor");
    assert_eq!(r.status, 200);
    let report = r.json();
    let bash = report["runtimes"].as_array().unwrap().iter().find(|r| r["runtime"] == "bash").unwrap().clone();
    assert_eq!(bash["available"], true);
    let alpha = &report["plugins"][0];
    assert_eq!((alpha["name"].as_str(), &alpha["hooks_valid"]), (Some("alpha"), &json!(true)));
    for key in ["runtime", "runtime_available", "install_hint"] {
        assert!(alpha.get(key).is_some(), "{key} missing: {alpha}");
    }
}

#[test]
fn reload_swaps_the_plugin_and_a_bad_manifest_keeps_the_old_one() {
    let site = Site::new();
    site.echo_plugin("alpha", "v1");
    site.config("[context_engine]\nplugin = \"alpha\"\n");
    let d = site.routes();
    assert_eq!(plugin_memories(&ingest(&d, "a1", "x")), ["alpha v1: x"]);

    // The manifest changes; until a reload the running version answers.
    site.echo_plugin("alpha", "v2");
    assert_eq!(plugin_memories(&ingest(&d, "a1", "x")), ["alpha v1: x"]);
    let r = d.post("/api/plugins/alpha/reload", "");
    assert_eq!(r.status, 200, "{}", r.body);
    let body = r.json();
    assert_eq!(
        (body["name"].as_str(), body["version"].as_str(), &body["hooks_valid"], &body["active"]),
        (Some("alpha"), Some("1.0.0"), &json!(true), &json!(true))
    );
    assert_eq!(body["hooks"], json!(["ingest", "after_turn"]));
    assert_eq!(plugin_memories(&ingest(&d, "a1", "x")), ["alpha v2: x"]);

    // A broken manifest: 400 naming the problem, and v2 keeps answering.
    write(&site.plugin_dir("alpha").join("plugin.toml"), "name = \"alpha\"\n[hooks]\ningest = \"../escape.sh\"\n");
    let r = d.post("/api/plugins/alpha/reload", "");
    assert_eq!(r.status, 400, "{}", r.body);
    let body = r.json();
    assert_eq!((&body["hooks_valid"], &body["stage"]), (&json!(false), &json!("load")), "{body}");
    assert!(body["error"].as_str().unwrap().contains("plugin.toml"), "names the file: {body}");
    assert_eq!(plugin_memories(&ingest(&d, "a1", "x")), ["alpha v2: x"]);

    // A runtime that is not installed loads (a call would fail): reload refuses it.
    site.echo_plugin("alpha", "v3");
    let manifest = site.plugin_dir("alpha").join("plugin.toml");
    let text = std::fs::read_to_string(&manifest)
        .unwrap()
        .replace("runtime = \"bash\"", "runtime = \"/nonexistent/launcher\"");
    write(&manifest, &text);
    let r = d.post("/api/plugins/alpha/reload", "");
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.json()["error"].as_str().unwrap().contains("cannot run"), "{}", r.body);
    assert_eq!(plugin_memories(&ingest(&d, "a1", "x")), ["alpha v2: x"], "the running version stays");

    let r = d.post("/api/plugins/ghost/reload", "");
    assert_eq!((r.status, r.json()["error"].as_str()), (404, Some("Plugin 'ghost' not found")));
    let r = d.post("/api/plugins/alpa/reload", "");
    assert_eq!(
        (r.status, r.json()["error"].as_str()),
        (404, Some("Plugin 'alpa' not found; did you mean `alpha`?")),
        "a misspelt plugin gets the nearest name, as the CLI gives it"
    );
    let r = d.post("/api/plugins/alpa/test-hook", "{\"hook\":\"ingest\"}");
    assert_eq!(r.status, 404);
    assert!(r.json()["error"].as_str().unwrap().ends_with("did you mean `alpha`?"), "{}", r.body);
    let r = d.post("/api/plugins/bad%20name/reload", "");
    assert_eq!((r.status, r.json()["stage"].clone()), (400, json!("name")), "{}", r.body);
}

/// A reload in the middle of a stream of calls: every call answers (from the
/// old or the new version), none fails.
#[test]
fn reload_during_a_stream_of_calls_loses_nothing() {
    use std::sync::atomic::AtomicUsize;
    let site = Site::new();
    site.echo_plugin("alpha", "v1");
    site.echo_plugin("beta", "v1");
    site.config("[context_engine]\nplugin_stack = [\"alpha\", \"beta\"]\n");
    let d = Arc::new(site.start(&[]));
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let (d, stop, calls) = (d.clone(), stop.clone(), calls.clone());
            std::thread::spawn(move || {
                let mut seen = Vec::new();
                let mut n = 0;
                // One more call after `stop`, so every worker sees the last version.
                let mut last = false;
                while !last {
                    last = stop.load(Ordering::SeqCst);
                    let r =
                        d.post(&format!("/api/agents/w{w}/ingest"), &json!({"message": format!("m{n}")}).to_string());
                    assert_eq!(r.status, 200, "call {n} of worker {w} failed: {}", r.body);
                    let got = plugin_memories(&r.json());
                    assert_eq!(got.len(), 2, "both layers answered call {n}: {got:?}");
                    seen.extend(got);
                    n += 1;
                    calls.fetch_add(1, Ordering::SeqCst);
                }
                seen
            })
        })
        .collect();
    // Calls keep flowing through every reload: wait for some between each.
    let wait_for_calls = |more: usize| {
        let target = calls.load(Ordering::SeqCst) + more;
        while calls.load(Ordering::SeqCst) < target {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    };
    wait_for_calls(8);
    for round in 2..=5 {
        site.set_version("alpha", &format!("v{round}"));
        let r = d.post("/api/plugins/alpha/reload", "");
        assert_eq!(r.status, 200, "{}", r.body);
        wait_for_calls(8);
    }
    stop.store(true, Ordering::SeqCst);
    let mut versions = std::collections::BTreeSet::new();
    for w in workers {
        for memory in w.join().expect("a worker saw a failed call") {
            versions.insert(memory.split(':').next().unwrap().to_owned());
        }
    }
    for v in ["alpha v1", "alpha v5", "beta v1"] {
        assert!(versions.contains(v), "{v} answered some call: {versions:?}");
    }
    let metrics = d.get("/api/context-engine/metrics").json();
    assert_eq!(metrics["ingest"]["failures"], 0, "{metrics}");
    assert!(metrics["ingest"]["calls"].as_u64().unwrap() >= 2 * 40, "{metrics}");
}

#[test]
fn a_token_guards_every_post_route_and_is_required_off_loopback() {
    let site = Site::new();
    site.echo_plugin("alpha", "v1");
    site.config("[context_engine]\nplugin = \"alpha\"\n[server]\ntoken = \"s3cret\"\n");
    let d = site.start(&[]);
    for (path, body) in [
        ("/api/agents/a1/ingest", "{}"),
        ("/api/plugins/alpha/reload", ""),
        ("/api/plugins/alpha/test-hook", "{\"hook\":\"ingest\"}"),
        ("/api/plugins/scaffold", "{\"name\":\"x\"}"),
    ] {
        let r = d.post(path, body);
        assert_eq!(r.status, 401, "{path}: {}", r.body);
        assert_eq!(r.header("www-authenticate"), Some("Bearer"));
        let r = d.post_with(path, body, &[("Authorization", "Bearer wrong")]);
        assert_eq!((r.status, r.json()["error"].as_str()), (401, Some("the bearer token is wrong")), "{path}");
    }
    assert!(!site.plugin_dir("x").exists(), "no scaffold without the token");
    let r = d.post_with("/api/agents/a1/ingest", "{\"message\":\"hi\"}", &[("Authorization", "Bearer s3cret")]);
    assert_eq!(r.status, 200, "{}", r.body);
    // Reading routes stay open.
    assert_eq!(d.get("/healthz").status, 200);
    assert_eq!(d.get("/api/plugins").status, 200);
    drop(d);

    // Beyond loopback without a token: refused before anything is served.
    let other = Site::new();
    let out = crate::util::ctxhost()
        .arg("--home")
        .arg(other.home())
        .args(["serve", "--addr", "0.0.0.0:0"])
        .env_remove("CTXHOST_TOKEN")
        .timeout(std::time::Duration::from_secs(20))
        .assert()
        .failure();
    let err = crate::util::stderr(&out);
    assert!(err.contains("refusing to listen on 0.0.0.0:0 without a token"), "{err}");
    assert!(err.contains("--token"), "{err}");
}

/// At the default log level the daemon says what it does: one line per
/// request (method, path, status, time) and its shutdown, never a token or a
/// query string.
#[test]
fn serve_logs_each_request_and_its_shutdown_without_secrets() {
    let site = Site::new();
    site.echo_plugin("alpha", "v1");
    site.config("[context_engine]\nplugin = \"alpha\"\n");
    let d = Daemon::start(&site.home(), &[], &[("CTXHOST_TOKEN", "tok-s3cret")]);
    assert_eq!(d.get("/healthz?key=query-s3cret").status, 200);
    assert_eq!(d.get("/api/plugin").status, 404);
    let auth = [("Authorization", "Bearer tok-s3cret")];
    let r = d.post_with("/api/agents/a1/ingest", "{\"message\":\"body-s3cret\"}", &auth);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(d.post("/api/agents/a1/ingest", "{}").status, 401);
    let (ok, stderr) = d.stop();
    assert!(ok, "{stderr}");
    let line = |method: &str, path: &str, status: u16| {
        let prefix = format!("{method} {path} {status} ");
        stderr.lines().any(|l| {
            l.split_once("ctxhost::daemon: ").is_some_and(|(_, rest)| {
                rest.starts_with(&prefix)
                    && rest.ends_with(" ms")
                    && rest[prefix.len()..rest.len() - 3].parse::<f64>().is_ok()
            })
        })
    };
    assert!(line("GET", "/healthz", 200), "the request line, without its query: {stderr}");
    assert!(line("GET", "/api/plugin", 404), "{stderr}");
    assert!(line("POST", "/api/agents/a1/ingest", 200), "{stderr}");
    assert!(line("POST", "/api/agents/a1/ingest", 401), "{stderr}");
    assert!(stderr.contains("SIGTERM: shutting down"), "{stderr}");
    assert!(stderr.lines().last().is_some_and(|l| l.ends_with("ctxhost::daemon: stopped")), "{stderr}");
    assert!(!stderr.contains("s3cret"), "no token, query or body in the log: {stderr}");
}

#[test]
fn shutdown_lets_pending_after_turn_calls_finish() {
    let site = Site::new();
    let marker = site.root.path().join("after_turn-finished");
    write(
        &site.plugin_dir("slow").join("plugin.toml"),
        "name = \"slow\"\nversion = \"1\"\n[env]\nMARKER = \"${MARKER}\"\n[hooks]\nruntime = \"bash\"\n\
         allow_filesystem = true\nafter_turn = \"a.sh\"\n",
    );
    write(&site.plugin_dir("slow").join("a.sh"), "cat > /dev/null\nsleep 1\ntouch \"$MARKER\"\necho '{}'\n");
    site.config("allowed_env_vars = [\"MARKER\"]\n[context_engine]\nplugin = \"slow\"\n");
    let d = Daemon::start(&site.home(), &[], &[("MARKER", marker.to_str().unwrap())]);
    let r = d.post("/api/agents/a1/after_turn", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
    assert_eq!(r.status, 200, "fire-and-forget: answered before the plugin ran");
    assert!(!marker.exists());
    let (ok, stderr) = d.stop();
    assert!(ok, "exit 0 on SIGTERM: {stderr}");
    assert!(marker.exists(), "the pending after_turn finished before exit: {stderr}");
}

#[test]
fn watch_reloads_on_code_changes_but_not_on_state_files() {
    let site = Site::new();
    site.echo_plugin("alpha", "v1");
    site.config("[context_engine]\nplugin = \"alpha\"\n");
    let d = site.start(&["--watch", "-v"]);
    // A plugin writing its own state: no reload, even well past the debounce.
    write(&site.plugin_dir("alpha").join("state.json"), "{\"n\":1}");
    write(&site.plugin_dir("alpha").join("data/notes.txt"), "x");
    std::thread::sleep(std::time::Duration::from_millis(900));
    // A manifest change: reloaded once the burst settles.
    site.set_version("alpha", "v2");
    let mut answer = Vec::new();
    for _ in 0..100 {
        answer = plugin_memories(&ingest(&d, "a1", "x"));
        if answer == ["alpha v2: x"] {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(answer, ["alpha v2: x"], "--watch reloaded the changed manifest");
    // More state writes after the reload: still no reload.
    write(&site.plugin_dir("alpha").join("state.json"), "{\"n\":2}");
    std::thread::sleep(std::time::Duration::from_millis(900));
    let (_, stderr) = d.stop();
    let reloads = stderr.matches("--watch: reloaded").count();
    assert_eq!(reloads, 1, "one reload for the manifest change, none for state files:\n{stderr}");
}

#[test]
fn watch_starts_on_a_fresh_home() {
    let site = Site::new();
    let d = site.start(&["--watch"]);
    assert_eq!(d.get("/healthz").status, 200);
    assert!(site.home().join("plugins").is_dir());
}

#[test]
fn plugins_route_lists_the_plugins_dir_as_it_is_now() {
    let site = Site::new();
    site.echo_plugin("alpha", "v1");
    let d = site.routes();
    let list = d.get("/api/plugins").json();
    let alpha = &list.as_array().unwrap()[0];
    // The catalog's status record: `state` (and more) besides the fields of before.
    assert_eq!(
        (list.as_array().unwrap().len(), &alpha["state"], &alpha["kind"]),
        (1, &json!("loaded"), &json!("script"))
    );
    let old_fields = ["name", "version", "runtime", "hooks", "enabled", "error"];
    let projected: serde_json::Map<String, Value> =
        old_fields.iter().filter_map(|k| alpha.get(*k).map(|v| ((*k).to_owned(), v.clone()))).collect();
    assert_eq!(
        Value::Object(projected),
        json!({"name": "alpha", "version": "1.0.0", "runtime": "bash", "hooks": ["ingest", "after_turn"], "enabled": true})
    );
    write(&site.plugin_dir("zeta").join("plugin.toml"), "name = \"zeta\"\n");
    let list = d.get("/api/plugins").json();
    let zeta = &list.as_array().unwrap()[1];
    assert_eq!(zeta["name"], "zeta");
    assert!(zeta["error"].as_str().unwrap().contains("version"), "a broken manifest is listed with its error: {zeta}");
}

#[test]
fn scaffold_route_creates_a_plugin_the_daemon_can_use_at_once() {
    let site = Site::new();
    let d = site.routes();
    let r = d.post("/api/plugins/scaffold", "{\"name\":\"fresh\",\"runtime\":\"bash\",\"description\":\"new one\"}");
    assert_eq!(r.status, 201, "{}", r.body);
    let body = r.json();
    assert_eq!((body["scaffolded"].as_bool(), body["name"].as_str()), (Some(true), Some("fresh")));
    assert!(Path::new(body["path"].as_str().unwrap()).join("plugin.toml").is_file());

    let r = d.post("/api/plugins/scaffold", "{\"name\":\"fresh\"}");
    assert_eq!((r.status, r.json()["error"].as_str()), (409, Some("Plugin 'fresh' already exists")));
    let r = d.post("/api/plugins/scaffold", "{\"name\":\"no/slash\"}");
    assert_eq!(r.status, 400);
    assert!(r.json()["error"].as_str().unwrap().starts_with("Invalid plugin name 'no/slash'"), "{}", r.body);
    let r = d.post("/api/plugins/scaffold", "{}");
    assert_eq!((r.status, r.json()["error"].as_str()), (400, Some("`name` is required")));

    let listed = d.get("/api/plugins").json();
    assert!(listed.as_array().unwrap().iter().any(|p| p["name"] == "fresh"), "{listed}");
    let r = d.post("/api/plugins/fresh/test-hook", "{\"hook\":\"after_turn\",\"input\":{\"messages\":[]}}");
    assert_eq!(r.status, 200, "the scaffolded plugin answers as generated: {}", r.body);
    assert_eq!(d.post("/api/plugins/fresh/reload", "").status, 200);
}

/// guest-examples/agent_api_client.py, stdlib only, drives a turn through
/// the agent API.
#[test]
fn the_python_agent_example_runs_against_the_server() {
    require_program("python3", "python3");
    let site = Site::new();
    site.echo_plugin("alpha", "v1");
    site.config("[context_engine]\nplugin = \"alpha\"\n");
    let d = site.start(&[]);
    let script = repo_root().join("guest-examples/agent-api/agent.py");
    let out = std::process::Command::new("python3")
        .arg(&script)
        .args(["--url", &format!("http://{}", d.addr), "--agent", "py-agent"])
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    // Turn 2 recalls what turn 1 said, through the built-in memory and the plugin.
    assert!(stdout.contains("recalled [default] My favourite colour is teal"), "{stdout}");
    assert!(stdout.contains("recalled [alpha] alpha v1: What is my favourite colour?"), "{stdout}");
    assert!(stdout.contains("assembled 3 messages"), "{stdout}");
}

/// A stack plugin that failed to load at start joins once fixed and
/// reloaded; a disabled one leaves the stack on reload.
#[test]
fn reload_brings_in_a_fixed_plugin_and_takes_out_a_disabled_one() {
    let site = Site::new();
    site.echo_plugin("alpha", "v1");
    write(&site.plugin_dir("beta").join("plugin.toml"), "name = \"beta\"\n");
    site.config("[context_engine]\nplugin_stack = [\"alpha\", \"beta\"]\n");
    let d = site.routes();
    assert_eq!(d.get("/healthz").json()["plugins"], json!(["alpha"]), "beta failed to load");
    site.echo_plugin("beta", "v1");
    let r = d.post("/api/plugins/beta/reload", "");
    assert_eq!((r.status, &r.json()["active"]), (200, &json!(true)), "{}", r.body);
    assert_eq!(d.get("/healthz").json()["plugins"], json!(["alpha", "beta"]));
    assert_eq!(plugin_memories(&ingest(&d, "a1", "x")), ["alpha v1: x", "beta v1: x"]);

    let out = crate::util::ctxhost().arg("--home").arg(site.home()).args(["plugin", "disable", "alpha"]).assert();
    out.success();
    let r = d.post("/api/plugins/alpha/reload", "");
    assert_eq!((r.status, &r.json()["active"]), (200, &json!(false)), "{}", r.body);
    assert_eq!(plugin_memories(&ingest(&d, "a1", "x")), ["beta v1: x"]);
    crate::util::ctxhost().arg("--home").arg(site.home()).args(["plugin", "enable", "alpha"]).assert().success();
    assert_eq!(d.post("/api/plugins/alpha/reload", "").json()["active"], true);
    assert_eq!(plugin_memories(&ingest(&d, "a1", "x")), ["alpha v1: x", "beta v1: x"]);
}

/// A component plugin in the stack reloads like a script: recompiled from
/// its new file, swapped in, and a broken file keeps the running version.
#[test]
fn a_component_plugin_reloads_and_a_broken_one_keeps_running() {
    let site = Site::new();
    crate::util::examples::copy_example("recall", &site.plugin_dir("recall"));
    site.config("[context_engine]\nplugin = \"recall\"\n");
    let d = site.routes();
    let turn = json!({"messages": [{"role": "user", "content": "The heron nests by the lake"}]});
    assert_eq!(d.post("/api/agents/a1/after_turn", &turn.to_string()).status, 200);
    let recalled = |d: &InProcess| {
        (0..100)
            .find_map(|_| {
                let got: Vec<String> = ingest(d, "a1", "where does the heron nest")["memories"]
                    .as_array()
                    .unwrap()
                    .iter()
                    // The built-in memory recalls the same text: one memory, both sources.
                    .filter(|m| m["sources"].as_array().unwrap().contains(&json!("recall")))
                    .map(|m| m["content"].as_str().unwrap().to_owned())
                    .collect();
                if got.is_empty() {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    None
                } else {
                    Some(got)
                }
            })
            .unwrap_or_default()
    };
    assert!(recalled(&d).iter().any(|m| m.contains("heron")), "the component stored and recalled the turn");

    let r = d.post("/api/plugins/recall/reload", "");
    assert_eq!(r.status, 200, "{}", r.body);
    let body = r.json();
    assert_eq!((body["runtime"].as_str(), &body["active"]), (Some("wasm"), &json!(true)), "{body}");
    assert_eq!(body["hooks"], json!(["ingest", "after_turn"]), "from the component's describe()");

    // A component file that is not wasm: 400, and the running one answers.
    std::fs::write(site.plugin_dir("recall").join("recall.wasm"), b"not wasm").unwrap();
    let r = d.post("/api/plugins/recall/reload", "");
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(recalled(&d).iter().any(|m| m.contains("heron")), "the old component still answers");
}

#[test]
fn a_daemon_killed_with_sigkill_runs_its_journaled_after_turn_calls_at_restart_exactly_once() {
    use ctxhost::host::store::journal::Journal;
    use std::io::Write;
    let site = Site::new();
    let root = site.root.path();
    let (started, gate, store) = (root.join("started"), root.join("gate"), root.join("diary.jsonl"));
    // One hook process at a time: `blocker`'s ingest holds the slot, so the
    // turn's after_turn is journaled and answered but cannot start before
    // the kill (a hook running at the kill dies with the daemon and runs again
    // at the replay: delivery is at least once). `diary` appends every
    // after_turn it sees to its store.
    for (name, hook, body) in [
        (
            "blocker",
            "ingest",
            format!(
                "read -r request\ntouch '{}'\nwhile [ ! -e '{}' ]; do sleep 0.02; done\necho '{{\"memories\":[]}}'\n",
                started.display(),
                gate.display()
            ),
        ),
        (
            "diary",
            "after_turn",
            format!("read -r request\nprintf '%s\\n' \"$request\" >> '{}'\necho '{{}}'\n", store.display()),
        ),
    ] {
        write(
            &site.plugin_dir(name).join("plugin.toml"),
            &format!(
                "name = \"{name}\"\nversion = \"1\"\nhook_timeout_secs = 120\nallow_filesystem = true\n\
                 [hooks]\nruntime = \"bash\"\n{hook} = \"a.sh\"\n"
            ),
        );
        write(&site.plugin_dir(name).join("a.sh"), &body);
    }
    site.config("max_concurrent_hooks = 1\n[context_engine]\nplugin_stack = [\"blocker\", \"diary\"]\n");
    let d = site.start(&[]);
    // The blocking ingest, never read: the daemon dies with it open.
    let mut held = std::net::TcpStream::connect(&d.addr).unwrap();
    let body = json!({"message": "hold the only hook slot"}).to_string();
    write!(
        held,
        "POST /api/agents/a1/ingest HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    crate::util::within(60, "the blocking ingest hook", || started.exists());
    let turn = json!({"messages": [{"role": "user", "content": "my cat is called Miso"}]}).to_string();
    let r = d.post("/api/agents/a1/after_turn", &turn);
    // SAFETY: kill(2) with the pid of our own child, not reaped yet.
    unsafe { libc::kill(d.pid(), libc::SIGKILL) };
    drop(d);
    assert_eq!(r.status, 200, "{}", r.body);
    let j =
        ctxhost::host::store::journal::SqliteJournal::open(&site.home().join("state.db"), Default::default()).unwrap();
    let pending = j.pending().unwrap();
    assert_eq!(pending.len(), 1, "the acknowledged turn is in the journal: {pending:?}");
    assert_eq!((pending[0].target.as_str(), pending[0].agent.as_str()), ("diary", "a1"));
    assert!(!store.exists(), "the plugin never ran in the killed daemon");

    // Open the gate so the restarted daemon's blocker does not wait.
    std::fs::write(&gate, "").unwrap();
    let d = site.start(&[]);
    crate::util::within(60, "the replayed after_turn", || std::fs::read_to_string(&store).is_ok_and(|t| !t.is_empty()));
    crate::util::within(60, "the entry to leave the journal", || j.pending().unwrap().is_empty());
    let metrics = d.get("/metrics").body;
    assert!(metrics.contains("\nctxhost_journal_replays_total 1\n"), "{metrics}");
    assert!(metrics.contains("\nctxhost_journal_dead_letters_total 0\n"), "{metrics}");
    // The built-in memory has the turn once (stored before the answer, not again).
    let recalled = ingest(&d, "a1", "what is my cat called");
    let (ok, stderr) = d.stop();
    assert!(ok, "{stderr}");
    drop(held);
    let seen = std::fs::read_to_string(&store).unwrap();
    assert_eq!(seen.lines().count(), 1, "the plugin's store has the turn exactly once: {seen}\nstderr:\n{stderr}");
    assert!(seen.contains("my cat is called Miso"), "{seen}");
    let default: Vec<&Value> =
        recalled["memories"].as_array().unwrap().iter().filter(|m| m["source"] == "default").collect();
    assert_eq!(default.len(), 1, "{recalled}");
    assert_eq!(default[0]["content"], "my cat is called Miso");
}

// ---- What the dashboard reads and does, as any client (issue 17) ----

const AUTH: (&str, &str) = ("Authorization", "Bearer T");

fn authed(d: &Daemon, method: &str, path: &str, body: Option<&str>) -> crate::util::http::Response {
    d.request(method, path, body, &[AUTH])
}

fn plugin_row(d: &Daemon, name: &str) -> Value {
    let r = d.get("/api/plugins");
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("{name} in {}", r.body))
}

/// `GET /api/plugins` says what the plugins table shows; enable and disable
/// work on a script plugin through the generic routes, and the engine
/// follows (its memories stop and come back).
#[test]
fn plugins_list_shows_priority_grants_sandbox_and_enable_disable_take_effect() {
    let site = Site::new();
    site.echo_plugin("alpha", "v1");
    write(
        &site.plugin_dir("broken").join("plugin.toml"),
        "name = \"broken\"\nversion = \"0.1.0\"\n[hooks]\nruntime = \"bash\"\ningest = \"missing.sh\"\n",
    );
    write(
        &site.plugin_dir("guard").join("plugin.toml"),
        "name = \"guard\"\nversion = \"0.3.0\"\npriority = 7\n[hooks]\nruntime = \"bash\"\ntool_call_pre = \"g.sh\"\n",
    );
    write(&site.plugin_dir("guard").join("g.sh"), "cat >/dev/null\necho '{\"action\":\"allow\"}'\n");
    site.config("[context_engine]\nplugin = \"alpha\"\n");
    let d = site.start(&["--token", "T"]);

    let alpha = plugin_row(&d, "alpha");
    assert_eq!(
        (alpha["state"].as_str(), alpha["kind"].as_str(), alpha["runtime"].as_str()),
        (Some("loaded"), Some("script"), Some("bash"))
    );
    assert_eq!(alpha["grants"]["network"], false, "the grant recorded at the first load: {alpha}");
    assert_eq!(alpha["grants"]["filesystem"], false);
    assert!(alpha["sandbox"]["layers"].is_array(), "{alpha}");
    assert_eq!(alpha["priority"], Value::Null, "no agent-loop priority declared");
    let guard = plugin_row(&d, "guard");
    assert_eq!(guard["priority"], 7, "{guard}");
    let broken = plugin_row(&d, "broken");
    assert_eq!(broken["state"], "error");
    assert!(broken["error"].as_str().unwrap().contains("missing.sh"), "{broken}");
    assert_eq!(broken["sandbox"], Value::Null, "not loaded, so no sandbox in force");

    // Disabling is guarded, recorded, and takes alpha out of the stack.
    assert_eq!(d.post("/api/plugins/alpha/disable", "").status, 401);
    let r = authed(&d, "POST", "/api/plugins/alpha/disable", Some(""));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!((r.json()["enabled"].as_bool(), r.json()["state"].as_str()), (Some(false), Some("disabled")));
    let alpha = plugin_row(&d, "alpha");
    assert_eq!((alpha["state"].as_str(), alpha["enabled"].as_bool()), (Some("disabled"), Some(false)));
    let reply = d.request("POST", "/api/agents/a1/ingest", Some("{\"message\":\"hi\"}"), &[AUTH]).json();
    assert!(plugin_memories(&reply).is_empty(), "a disabled plugin is not called: {reply}");
    let r = authed(&d, "POST", "/api/plugins/alpha/enable", Some(""));
    assert_eq!(
        (r.status, r.json()["state"].as_str(), r.json()["active"].as_bool()),
        (200, Some("loaded"), Some(true)),
        "{}",
        r.body
    );
    let reply = d.request("POST", "/api/agents/a1/ingest", Some("{\"message\":\"hi\"}"), &[AUTH]).json();
    assert_eq!(plugin_memories(&reply), ["alpha v1: hi"]);
    // A plugin that cannot start: the choice is kept, the reply says why.
    let r = authed(&d, "POST", "/api/plugins/broken/enable", Some(""));
    assert_eq!((r.status, r.json()["state"].as_str()), (400, Some("error")), "{}", r.body);
    assert!(r.json()["error"].as_str().unwrap().contains("missing.sh"), "{}", r.body);
    let r = authed(&d, "POST", "/api/plugins/alph/disable", Some(""));
    assert_eq!(r.status, 404);
    assert!(r.json()["error"].as_str().unwrap().contains("did you mean `alpha`"), "{}", r.body);
}

/// `PUT /api/plugins/{name}/grants` records what `ctxhost plugin grant`
/// would, says what it opens, and puts it in force; a dry run records nothing.
#[test]
fn grants_route_records_the_grant_says_what_it_opens_and_reloads() {
    let site = Site::new();
    site.echo_plugin("alpha", "v1");
    site.config("[context_engine]\nplugin = \"alpha\"\n");
    let d = site.start(&["--token", "T"]);
    let grants_file = site.home().join("grants.toml");
    let before = std::fs::read_to_string(&grants_file).unwrap();
    let before_layers = plugin_row(&d, "alpha")["sandbox"]["layers"].clone();

    let r =
        authed(&d, "PUT", "/api/plugins/alpha/grants", Some("{\"network\":true,\"env\":[\"HOME\"],\"dry_run\":true}"));
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["opens"], json!(["network access", "host variable HOME"]), "{v}");
    assert_eq!((v["dry_run"].as_bool(), v["reloaded"].as_bool()), (Some(true), Some(false)));
    assert_eq!(std::fs::read_to_string(&grants_file).unwrap(), before, "a dry run records nothing");

    let r = authed(&d, "PUT", "/api/plugins/alpha/grants", Some("{\"network\":true}"));
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["opens"], json!(["network access"]));
    assert_eq!(v["changes"], json!(["allow_network: false -> true"]));
    assert_eq!((v["reloaded"].as_bool(), v["active"].as_bool()), (Some(true), Some(true)), "{v}");
    let file = std::fs::read_to_string(&grants_file).unwrap();
    let recorded: toml::Table = toml::from_str(&file).unwrap();
    assert_eq!(recorded["plugins"]["alpha"]["allow_network"].as_bool(), Some(true), "{file}");
    let row = plugin_row(&d, "alpha");
    assert_eq!(row["grants"]["network"], true);
    // The manifest does not ask for the network, so the effective settings
    // (and the sandbox) are as before: a grant allows, it never adds.
    assert_eq!(row["sandbox"]["layers"], before_layers, "{row}");

    // The same as `ctxhost plugin grant alpha` (no --network): narrowed again.
    let r = authed(&d, "PUT", "/api/plugins/alpha/grants", Some("{}"));
    assert_eq!((r.status, r.json()["opens"].clone()), (200, json!([])), "{}", r.body);
    assert_eq!(r.json()["changes"], json!(["allow_network: true -> false"]));
    // Refusals name the field.
    let r = authed(&d, "PUT", "/api/plugins/alpha/grants", Some("{\"env\":[\"A=B\"]}"));
    assert_eq!(r.status, 400);
    assert!(r.json()["error"].as_str().unwrap().contains("\"A=B\""), "{}", r.body);
    let r = authed(&d, "PUT", "/api/plugins/alpha/grants", Some("{\"netwrok\":true}"));
    assert_eq!(r.status, 400);
    assert!(r.json()["error"].as_str().unwrap().contains("did you mean `network`"), "{}", r.body);
    assert_eq!(authed(&d, "PUT", "/api/plugins/nope/grants", Some("{}")).status, 404);
    assert_eq!(d.send("PUT", "/api/plugins/alpha/grants", Some("{}")).status, 401);
}

/// A line a hook writes to stderr is in `GET /api/logs` (poll) and on
/// `GET /api/logs/stream` (live), with its plugin and hook; both need the token.
#[test]
fn plugin_stderr_is_served_by_poll_and_live_stream() {
    use std::io::{Read, Write};
    let site = Site::new();
    write(
        &site.plugin_dir("talker").join("plugin.toml"),
        "name = \"talker\"\nversion = \"0.1.0\"\n[hooks]\nruntime = \"bash\"\ningest = \"i.sh\"\n",
    );
    write(
        &site.plugin_dir("talker").join("i.sh"),
        "read -r line\necho \"talker saw: $LIBREFANG_MESSAGE\" >&2\necho '{\"memories\":[]}'\n",
    );
    site.config("[context_engine]\nplugin = \"talker\"\n");
    let d = site.start(&["--token", "T"]);
    assert_eq!(d.get("/api/logs").status, 401);
    assert_eq!(d.get("/api/logs/stream").status, 401);
    d.request("POST", "/api/agents/a1/ingest", Some("{\"message\":\"first words\"}"), &[AUTH]);
    let mut next = 0;
    crate::util::within(10, "the stderr line in /api/logs", || {
        let v = authed(&d, "GET", "/api/logs?plugin=talker", None).json();
        let found = v["lines"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["line"] == "talker saw: first words" && l["hook"] == "ingest" && l["plugin"] == "talker");
        next = v["next"].as_u64().unwrap();
        found
    });
    assert!(next >= 1);
    let v = authed(&d, "GET", &format!("/api/logs?after={next}"), None).json();
    assert_eq!(v["lines"], json!([]), "nothing after the last line: {v}");
    assert_eq!(v["missed"], 0);
    let v = authed(&d, "GET", "/api/logs?plugin=nobody", None).json();
    assert_eq!(v["lines"], json!([]), "filtered by plugin");

    // Live: a stream opened now sees the line of a call made after it.
    let mut conn = std::net::TcpStream::connect(&d.addr).unwrap();
    conn.set_read_timeout(Some(std::time::Duration::from_secs(1))).unwrap();
    write!(conn, "GET /api/logs/stream?after={next} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer T\r\n\r\n").unwrap();
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let mut sent = false;
    while !seen.contains("talker saw: live words") {
        assert!(std::time::Instant::now() < deadline, "no live line on the stream: {seen}");
        if let Ok(n) = conn.read(&mut buf) {
            assert!(n > 0, "the stream ended: {seen}");
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        if !sent && seen.contains("text/event-stream") {
            d.request("POST", "/api/agents/a1/ingest", Some("{\"message\":\"live words\"}"), &[AUTH]);
            sent = true;
        }
    }
    assert!(seen.contains("event: line"), "{seen}");
    assert!(!seen.contains("first words"), "only lines after `after`: {seen}");
    // An open stream ends with the daemon: it does not hold up the shutdown.
    let started = std::time::Instant::now();
    let (clean, stderr) = d.stop();
    assert!(clean, "{stderr}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "shutdown took {:?}", started.elapsed());
    let mut rest = String::new();
    let _ = conn.read_to_string(&mut rest);
    drop(conn);
}

/// A turn driven through the agent API is in the turn log: the recalled
/// memories with their sources, the window with token counts and what was
/// trimmed, the tool result before and after, each hook's timing.
#[test]
fn turns_log_what_the_engine_did_on_a_turn() {
    let site = Site::new();
    site.echo_plugin("alpha", "v1");
    site.config("[context_engine]\nplugin = \"alpha\"\n");
    let d = site.start(&["--token", "T"]);
    let post = |hook: &str, body: Value| {
        let r = authed(&d, "POST", &format!("/api/agents/a7/{hook}"), Some(&body.to_string()));
        assert_eq!(r.status, 200, "{hook}: {}", r.body);
        r.json()
    };
    // A first turn leaves a memory in the built-in store.
    post("ingest", json!({"message": "I like jazz"}));
    post("after_turn", json!({"messages": [{"role": "user", "content": "I like jazz records a lot"}]}));
    // The second turn recalls it.
    post("ingest", json!({"message": "what music do I like? jazz?"}));
    let long: Vec<Value> = (0..40)
        .map(|i| json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": format!("message {i} {}", "word ".repeat(400))}))
        .collect();
    post("assemble", json!({"system_prompt": "be brief", "messages": long, "context_window_tokens": 4000}));
    post("transform_tool_result", json!({"tool_name": "shell_exec", "content": "x".repeat(50_000)}));
    post("after_turn", json!({"messages": [{"role": "user", "content": "what music do I like? jazz?"}]}));

    let mut turns = Value::Null;
    crate::util::within(10, "two turns logged", || {
        let r = authed(&d, "GET", "/api/turns?agent=a7", None);
        turns = r.json();
        turns["turns"].as_array().is_some_and(|t| t.len() == 2 && t[0]["ended_ms"].is_u64())
    });
    assert_eq!(d.get("/api/turns?agent=a7").status, 401, "turns show memories: guarded");
    let agents = d.get("/api/agents").json();
    assert_eq!(agents["agents"][0]["agent_id"], "a7", "{agents}");
    let turn = &turns["turns"][0];
    assert_eq!(turn["message"], "what music do I like? jazz?");
    let memories = turn["memories"].as_array().unwrap();
    assert!(
        memories.iter().any(|m| m["source"] == "default" && m["content"].as_str().unwrap().contains("jazz records")),
        "{turn}"
    );
    assert!(memories.iter().any(|m| m["source"] == "alpha"), "{turn}");
    let window = &turn["window"];
    assert_eq!((window["messages_in"].as_u64(), window["window_tokens"].as_u64()), (Some(40), Some(4000)), "{window}");
    assert!(window["tokens_in"].as_u64().unwrap() > window["tokens_out"].as_u64().unwrap(), "{window}");
    assert!(!window["trimmed"].as_array().unwrap().is_empty(), "a 40-message history over 4000 tokens is trimmed");
    assert_eq!(window["messages_out"].as_u64().unwrap() as usize, window["messages"].as_array().unwrap().len());
    let tool = &turn["tool_results"][0];
    assert_eq!(tool["tool_name"], "shell_exec");
    assert!(tool["before"].as_str().unwrap().ends_with('…'), "cut to the log's bound");
    let hooks = turn["hooks"].as_array().unwrap();
    let who: Vec<(&str, &str)> =
        hooks.iter().map(|h| (h["hook"].as_str().unwrap(), h["plugin"].as_str().unwrap())).collect();
    assert!(who.contains(&("ingest", "alpha")) && who.contains(&("ingest", "default")), "{who:?}");
    assert!(who.contains(&("assemble", "default")), "{who:?}");
    assert!(hooks.iter().all(|h| h["elapsed_ms"].as_f64().unwrap() >= 0.0 && h["outcome"] == "success"), "{hooks:?}");
    assert_eq!(turns["turns"][1]["message"], "I like jazz");
    assert_eq!(authed(&d, "GET", "/api/turns", None).status, 400, "the agent is required");
}

/// The built-in memory can be searched and a memory deleted; a deleted
/// memory is no longer recalled.
#[test]
fn memory_routes_search_and_delete() {
    let site = Site::new();
    site.config("");
    let d = site.start(&["--token", "T"]);
    let r = authed(
        &d,
        "POST",
        "/api/agents/m1/after_turn",
        Some(
            &json!({"messages": [
        {"role": "user", "content": "my cat is called Miso"},
        {"role": "user", "content": "I grow tomatoes in the garden"}]})
            .to_string(),
        ),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(d.get("/api/memory/m1").status, 401);
    let all = authed(&d, "GET", "/api/memory/m1", None).json();
    assert_eq!(all["total"], 2, "{all}");
    assert_eq!(all["memories"][0]["content"], "I grow tomatoes in the garden", "newest first: {all}");
    let found = authed(&d, "GET", "/api/memory/m1?q=cat%20Miso", None).json();
    let found = found["memories"].as_array().unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0]["source"], "default");
    let id = found[0]["id"].as_str().unwrap().to_owned();
    assert_eq!(authed(&d, "GET", "/api/memory/other?q=cat", None).json()["memories"], json!([]), "per agent");
    assert_eq!(authed(&d, "DELETE", &format!("/api/memory/other/{id}"), None).status, 404, "another agent's id");
    let r = authed(&d, "DELETE", &format!("/api/memory/m1/{id}"), None);
    assert_eq!((r.status, r.json()["deleted"].as_bool()), (200, Some(true)), "{}", r.body);
    assert_eq!(authed(&d, "DELETE", &format!("/api/memory/m1/{id}"), None).status, 404);
    let recalled =
        authed(&d, "POST", "/api/agents/m1/ingest", Some("{\"message\":\"what is my cat called? Miso?\"}")).json();
    assert!(!recalled.to_string().contains("Miso\""), "deleted, so not recalled: {recalled}");
    assert_eq!(authed(&d, "GET", "/api/memory/m1", None).json()["total"], 1);
}

/// Health samples: the calls of an interval show in a sample with the
/// breaker state; and `serve` prints the dashboard's address.
#[test]
fn health_series_samples_the_calls_and_serve_prints_the_dashboard_url() {
    use std::io::BufRead;
    let site = Site::new();
    site.echo_plugin("alpha", "v1");
    site.config("[context_engine]\nplugin = \"alpha\"\n");
    let d = site.start(&[]);
    for _ in 0..3 {
        ingest(&d, "h1", "hello");
    }
    let mut v = Value::Null;
    crate::util::within(15, "a sample with the 3 ingest calls", || {
        v = d.get("/api/health/series?minutes=1").json();
        v["series"].as_array().unwrap().iter().any(|s| {
            s["plugin"] == "alpha"
                && s["hook"] == "ingest"
                && s["samples"].as_array().unwrap().iter().map(|x| x["calls"].as_u64().unwrap()).sum::<u64>() == 3
        })
    });
    let s = v["series"].as_array().unwrap().iter().find(|s| s["plugin"] == "alpha" && s["hook"] == "ingest").unwrap();
    assert_eq!(
        (s["breaker"].as_str(), s["totals"]["calls"].as_u64(), s["worker_respawns"].as_u64()),
        (Some("closed"), Some(3), Some(0)),
        "{s}"
    );
    assert!(s["samples"][0]["p50_ms"].as_f64().unwrap() > 0.0, "{s}");
    assert_eq!(v["interval_secs"], 5);
    drop(d);

    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("ctxhost"))
        .arg("--home")
        .arg(site.home())
        .args(["serve", "--addr", "127.0.0.1:0"])
        .env_remove("CTXHOST_TOKEN")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let listening = lines.next().unwrap().unwrap();
    let dashboard = lines.next().unwrap().unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let addr = listening.strip_prefix("listening on http://").unwrap();
    assert_eq!(dashboard, format!("dashboard: http://{addr}/"));
}
