//! Typed hook failures through `ctxhost serve`: each kind produced by a real
//! plugin — the hostile component (fuel, memory, panic, deadline, a trap, its
//! own failure) and bash scripts (timeout, signal, exit code, no reply, a
//! missing script, the breaker) — answered by `POST /api/agents/{agent}/ingest`
//! with the status of its kind and the kind in the body, and by test-hook with
//! LibreFang's 400 and the same kind.

use serde_json::{Value, json};

use crate::util::http::{Daemon, Response};
use crate::util::site::Site;
use crate::util::write;

/// The hostile component as plugin `name`, taking part only for agents whose
/// id contains `name`, failing the turn (`abort`), its breaker off.
fn hostile(site: &Site, name: &str, sandbox: &str) {
    let dir = site.plugin_dir(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(crate::util::examples::component("hostile"), dir.join("hostile.wasm")).unwrap();
    write(
        &dir.join("plugin.toml"),
        &format!(
            "name = \"{name}\"\nversion = \"0.1.0\"\nruntime = \"wasm\"\ncomponent = \"hostile.wasm\"\n\
             on_hook_failure = \"abort\"\nonly_for_agent_ids = [\"{name}\"]\n\
             circuit_breaker = {{ max_failures = 0 }}\n[sandbox]\n{sandbox}"
        ),
    );
}

/// A bash plugin `name` whose ingest does what the message says: `sleep`
/// past its 1 s timeout, die by `signal`, `exit` 3, stay `silent`; anything
/// else is answered. Abort policy, only for agents containing `name`.
fn script(site: &Site, name: &str, breaker: &str) {
    let dir = site.plugin_dir(name);
    write(
        &dir.join("plugin.toml"),
        &format!(
            "name = \"{name}\"\nversion = \"0.1.0\"\n[hooks]\nruntime = \"bash\"\ningest = \"ingest.sh\"\n\
             hook_timeout_secs = 1\non_hook_failure = \"abort\"\nonly_for_agent_ids = [\"{name}\"]\n\
             circuit_breaker = {breaker}\n"
        ),
    );
    write(
        &dir.join("ingest.sh"),
        "cat > /dev/null\ncase \"$LIBREFANG_MESSAGE\" in\n\
         sleep) sleep 30 ;;\n\
         signal) kill -SEGV $$ ;;\n\
         exit) echo 'broken on purpose' >&2; exit 3 ;;\n\
         silent) ;;\n\
         *) echo '{\"memories\":[{\"content\":\"answered\"}]}' ;;\n\
         esac\n",
    );
}

fn ingest(d: &Daemon, agent: &str, message: &str) -> Response {
    d.post(&format!("/api/agents/{agent}/ingest"), &json!({"message": message}).to_string())
}

/// The status and the body's `kind`, after checking the body names the
/// plugin and the hook.
fn failure(r: &Response, plugin: &str) -> (u16, String) {
    let body: Value = r.json();
    assert_eq!((body["plugin"].as_str(), body["hook"].as_str()), (Some(plugin), Some("ingest")), "{body}");
    assert!(body["error"].as_str().is_some_and(|e| e.contains(plugin)), "the message names the plugin: {body}");
    (r.status, body["kind"].as_str().unwrap_or_default().to_owned())
}

#[test]
fn each_failure_kind_has_its_status_through_the_agent_route() {
    let site = Site::new();
    hostile(&site, "hostile", "fuel = 200000000\nmemory_mb = 32\ntimeout_ms = 20000\n");
    hostile(&site, "slowpoke", "fuel = 9000000000000000000\ntimeout_ms = 300\n");
    script(&site, "script", "{ max_failures = 0 }");
    script(&site, "vanishing", "{ max_failures = 0 }");
    script(&site, "fragile", "{ max_failures = 1, reset_secs = 60 }");
    write(
        &site.home().join("config.toml"),
        "[context_engine]\nplugin_stack = [\"hostile\", \"slowpoke\", \"script\", \"vanishing\", \"fragile\"]\n",
    );
    let d = site.start(&[]);

    // The plugins answer when nothing goes wrong.
    for agent in ["to-script", "to-hostile"] {
        let r = ingest(&d, agent, if agent == "to-hostile" { "read-granted" } else { "hello" });
        assert_eq!(r.status, 200, "{agent}: {}", r.body);
    }

    let component = [
        ("loop", "out_of_fuel", 502, "out of fuel after "),
        ("memory", "memory_limit", 502, "memory limit of 32 MiB exceeded"),
        ("panic", "guest_panic", 502, "the hostile guest gave up on purpose"),
        ("recursion", "crashed", 502, "stack overflow"),
        ("fail", "failed", 502, "asked to fail"),
    ];
    for (order, kind, status, text) in component {
        let r = ingest(&d, "to-hostile", order);
        assert_eq!(failure(&r, "hostile"), (status, kind.to_owned()), "{order}: {}", r.body);
        assert!(r.body.contains(text), "{order}: {}", r.body);
    }
    let r = ingest(&d, "to-slowpoke", "loop");
    assert_eq!(failure(&r, "slowpoke"), (504, "timeout".to_owned()), "{}", r.body);
    assert!(r.body.contains("Hook timed out after 300 ms"), "{}", r.body);

    let scripts = [
        ("sleep", "timeout", 504, "Hook timed out after 1s"),
        ("signal", "crashed", 502, "SIGSEGV"),
        ("exit", "failed", 502, "exit code 3"),
        ("silent", "bad_reply", 502, "Hook produced no output"),
    ];
    for (order, kind, status, text) in scripts {
        let r = ingest(&d, "to-script", order);
        assert_eq!(failure(&r, "script"), (status, kind.to_owned()), "{order}: {}", r.body);
        assert!(r.body.contains(text), "{order}: {}", r.body);
    }

    // A script removed under the running daemon cannot run: 503.
    std::fs::remove_file(site.plugin_dir("vanishing").join("ingest.sh")).unwrap();
    let r = ingest(&d, "to-vanishing", "hello");
    assert_eq!(failure(&r, "vanishing"), (503, "unavailable".to_owned()), "{}", r.body);
    assert!(r.body.contains("Script not found"), "{}", r.body);

    // The breaker: the failure opens it, and the next call is refused
    // without running the plugin (503) — the script's exit is not seen again.
    let r = ingest(&d, "to-fragile", "exit");
    assert_eq!(failure(&r, "fragile"), (502, "failed".to_owned()), "{}", r.body);
    let r = ingest(&d, "to-fragile", "hello");
    assert_eq!(failure(&r, "fragile"), (503, "unavailable".to_owned()), "{}", r.body);
    assert!(r.body.contains("circuit-open"), "{}", r.body);

    // The host keeps serving every plugin afterwards.
    assert_eq!(ingest(&d, "to-hostile", "read-granted").status, 200);
    assert_eq!(ingest(&d, "to-script", "hello").status, 200);
}

#[test]
fn test_hook_keeps_librefangs_400_and_says_the_kind() {
    let site = Site::new();
    hostile(&site, "hostile", "fuel = 200000000\nmemory_mb = 32\ntimeout_ms = 20000\n");
    script(&site, "script", "{ max_failures = 0 }");
    let d = site.start(&[]);
    let test_hook = |plugin: &str, message: &str| {
        let body = json!({"hook": "ingest", "input": {"agent_id": "a", "message": message}});
        d.post(&format!("/api/plugins/{plugin}/test-hook"), &body.to_string())
    };
    for (plugin, message, kind) in
        [("hostile", "loop", "out_of_fuel"), ("hostile", "panic", "guest_panic"), ("script", "sleep", "timeout")]
    {
        let r = test_hook(plugin, message);
        let body = r.json();
        assert_eq!((r.status, &body["success"], body["kind"].as_str()), (400, &json!(false), Some(kind)), "{body}");
    }
    let r = test_hook("script", "hello");
    assert_eq!((r.status, r.json()["kind"].is_null()), (200, true), "{}", r.body);
}

/// Through the agent engine: a component's `communicate` past its deadline is
/// FaustBot's 500 on the communicate route, with the kind the runner gave.
#[test]
fn the_agent_engine_keeps_the_kind_to_its_routes() {
    let site = Site::new();
    let dir = site.plugin_dir("services-probe");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(crate::util::examples::component("services_probe"), dir.join("probe.wasm")).unwrap();
    write(
        &dir.join("plugin.toml"),
        "name = \"services-probe\"\nversion = \"0.1.0\"\nruntime = \"wasm\"\ncomponent = \"probe.wasm\"\n\
         [sandbox]\nfuel = 200_000_000\nmemory_mb = 32\ntimeout_ms = 300\n",
    );
    let d = site.start(&[]);
    let r = d.post("/faust/plugins/services-probe/communicate", &json!({"spin": true}).to_string());
    let body = r.json();
    assert_eq!((r.status, body["kind"].as_str()), (500, Some("timeout")), "{body}");
    assert!(body["detail"].as_str().unwrap().contains("Hook timed out after 300 ms"), "{body}");
    let r = d.post("/faust/plugins/services-probe/communicate", &json!({"calls": []}).to_string());
    assert_eq!(r.status, 200, "the plugin still answers: {}", r.body);
}
