//! Several ctxhost instances on one PostgreSQL store (`[store] url`): what
//! one instance acknowledged, every other one sees. Each test starts real
//! `ctxhost serve`/`sidecar` processes on a fresh database of the test
//! process's throw-away cluster (`util::pg`).

use std::time::Duration;

use serde_json::{Value, json};

use crate::util::pg;
use crate::util::site::Site;
use crate::util::{ctxhost, write};

/// A home whose config names `url` as its store.
fn site_on(url: &str) -> Site {
    let site = Site::new();
    write(&site.home().join("config.toml"), &format!("[store]\nurl = \"{url}\"\n"));
    site
}

fn turn(text: &str) -> String {
    json!({"messages": [{"role": "user", "content": text}, {"role": "assistant", "content": "noted"}]}).to_string()
}

fn recalled(body: &Value) -> Vec<String> {
    body["memories"].as_array().unwrap().iter().map(|m| m["content"].as_str().unwrap().to_owned()).collect()
}

/// An after_turn acknowledged by instance A is recalled by an ingest through
/// instance B, and the sidecar on the same store recalls it too: the
/// built-in memory lives in the database, in neither home.
#[test]
fn an_after_turn_through_one_instance_is_recalled_through_another() {
    let db = pg::database();
    let (a, b) = (site_on(&db.url), site_on(&db.url));
    let (da, dbb) = (a.start(&[]), b.start(&[]));

    let r = da.post("/api/agents/a1/after_turn", &turn("my cat is called Tom"));
    assert_eq!((r.status, r.json()), (200, json!({"type": "ok"})), "{}", r.body);
    let r = dbb.post("/api/agents/a1/ingest", &json!({"message": "what is my cat called?"}).to_string());
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(recalled(&r.json()), ["my cat is called Tom"]);
    assert_eq!(r.json()["memories"][0]["sources"], json!(["default"]));
    // Another agent's memory stays its own, on every instance.
    let r = dbb.post("/api/agents/a2/ingest", &json!({"message": "what is my cat called?"}).to_string());
    assert_eq!(recalled(&r.json()), Vec::<String>::new());

    // The same turn through B again is not a second memory.
    let r = dbb.post("/api/agents/a1/after_turn", &turn("my cat is called Tom"));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        db.query("SELECT count(*) FROM memory_items WHERE content = 'my cat is called Tom'").unwrap(),
        [[Some("1".to_owned())]]
    );
    for site in [&a, &b] {
        assert!(!site.home().join("memory.db").exists(), "the memory is in the database, not in {:?}", site.home());
    }

    // LibreFang's sidecar on a third home, same store.
    let c = site_on(&db.url);
    let agent = "6f9619ff-8b86-4011-b42d-00c04fc964ff";
    let r = da.post(&format!("/api/agents/{agent}/after_turn"), &turn("I grow basil on the balcony"));
    assert_eq!(r.status, 200, "{}", r.body);
    let line = json!({"id": 1, "method": "ingest", "params": {"agent_id": agent, "user_message": "what do I grow on the balcony?", "peer_id": null}});
    let out = ctxhost()
        .arg("--home")
        .arg(c.home())
        .arg("sidecar")
        .write_stdin(format!("{line}\n"))
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    let reply: Value = serde_json::from_slice(out.stdout.split(|&b| b == b'\n').next().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {out:?}"));
    let fragments = reply["ok"]["recalled_memories"].as_array().unwrap_or_else(|| panic!("{reply}"));
    assert_eq!(fragments.len(), 1, "{reply}");
    assert_eq!(fragments[0]["content"], "I grow basil on the balcony");
    assert!(!c.home().join("memory.db").exists());
}

/// `ctxhost run` keeps its throw-away memory even when the config names a
/// store: runs stay repeatable and leave nothing in the shared memory.
#[test]
fn run_on_a_store_home_keeps_a_throw_away_memory() {
    let db = pg::database();
    let site = site_on(&db.url);
    let transcript = site.home().join("chat.jsonl");
    write(&transcript, "{\"user\":\"my dog is called Rex\",\"assistant\":\"Nice.\"}\n");
    let out = ctxhost()
        .arg("--home")
        .arg(site.home())
        .args(["run", "--transcript"])
        .arg(&transcript)
        .timeout(Duration::from_secs(60))
        .assert()
        .success();
    let text = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    assert!(text.contains("\nmemory: throw-away"), "{text}");
    let rows = db.query("SELECT count(*) FROM memory_items").map(|r| r[0][0].clone());
    assert!(matches!(rows.as_ref().map(|r| r.as_deref()), Ok(Some("0")) | Err(_)), "{rows:?}");
}

/// A bash ingest plugin `p` whose hook touches `<marks>/<tag>` and recalls
/// `from <tag>`: the same text in every home that should run one version.
fn versioned_plugin(site: &Site, marks: &std::path::Path, tag: &str) {
    write(
        &site.plugin_dir("p").join("plugin.toml"),
        "name = \"p\"\nversion = \"1.0.0\"\n[hooks]\nruntime = \"bash\"\nallow_filesystem = true\ningest = \"hooks/ingest.sh\"\n",
    );
    write(
        &site.plugin_dir("p").join("hooks/ingest.sh"),
        &format!(
            "cat > /dev/null\ntouch '{}'\necho '{{\"type\":\"ingest_result\",\"memories\":[{{\"content\":\"from {tag}\"}}]}}'\n",
            marks.join(tag).display()
        ),
    );
}

fn plugin_p(list: &Value) -> Value {
    list.as_array().unwrap_or_else(|| panic!("{list}")).iter().find(|p| p["name"] == "p").cloned().unwrap()
}

/// `ctxhost --home <site> <args>`: exit code and stdout.
fn run(site: &Site, args: &[&str]) -> (Option<i32>, String) {
    let out = ctxhost().arg("--home").arg(site.home()).args(args).timeout(Duration::from_secs(60)).output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr))
}

/// Two homes on one store hold plugin `p`; the second's hook script differs.
/// The first instance's files are the fleet's version (recorded in the
/// store); the second says so in `doctor`, `plugin list` and
/// `/api/plugins`, naming both hashes, and never runs its changed script.
/// Once the operator deploys the new files everywhere and adopts them
/// (`ctxhost plugin adopt`), a reload on each brings both to that version.
#[test]
fn an_instance_whose_plugin_files_differ_refuses_the_plugin_until_the_fleet_agrees() {
    let db = pg::database();
    let marks = tempfile::tempdir().unwrap();
    let (a, b) = (site_on(&db.url), site_on(&db.url));
    for site in [&a, &b] {
        write(
            &site.home().join("config.toml"),
            &format!("[store]\nurl = \"{}\"\n[context_engine]\nplugin = \"p\"\n", db.url),
        );
        versioned_plugin(site, marks.path(), "v1");
    }
    let da = a.start(&[]);
    let fleet = plugin_p(&da.get("/api/plugins").json());
    assert_eq!(fleet["state"], "loaded", "{fleet}");
    let h1 = fleet["content_hash"].as_str().unwrap().to_owned();
    assert!(h1.starts_with("sha256:"), "{h1}");
    let rows = db.query("SELECT hash, version FROM plugin_versions WHERE plugin = 'p'").unwrap();
    assert_eq!(rows, [[Some(h1.clone()), Some("1.0.0".to_owned())]], "the first instance recorded its version");

    // B's script changes (one home only): B's files are not the fleet's.
    versioned_plugin(&b, marks.path(), "v2");
    let (code, listed) = run(&b, &["plugin", "list", "--json"]);
    assert_eq!(code, Some(0), "{listed}");
    let h2 = plugin_p(&serde_json::from_str(listed.lines().next().unwrap()).unwrap())["content_hash"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(h1, h2);
    let (code, text) = run(&b, &["doctor"]);
    assert_eq!(code, Some(1), "{text}");
    let line = text.lines().find(|l| l.trim_start().starts_with("p ")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains(&h1) && line.contains(&h2) && line.contains("ctxhost plugin adopt p"), "{line}");
    let (code, text) = run(&a, &["doctor"]);
    assert_eq!(code, Some(0), "A's files are the fleet's: {text}");

    let dbb = b.start(&[]);
    let status = plugin_p(&dbb.get("/api/plugins").json());
    assert_eq!((&status["state"], &status["content_hash"]), (&json!("error"), &json!(h2)), "{status}");
    let error = status["error"].as_str().unwrap();
    assert!(error.contains(&h1) && error.contains(&h2), "{error}");
    // An ingest through B is served without p: its changed script never runs.
    let ingest = json!({"message": "anything?"}).to_string();
    let r = dbb.post("/api/agents/a1/ingest", &ingest);
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(!recalled(&r.json()).contains(&"from v2".to_owned()), "{}", r.body);
    assert!(!marks.path().join("v2").exists(), "B ran its changed script");
    // A serves p as before.
    let r = da.post("/api/agents/a1/ingest", &ingest);
    assert!(recalled(&r.json()).contains(&"from v1".to_owned()), "{}", r.body);
    assert!(marks.path().join("v1").exists());
    assert_eq!(db.query("SELECT hash FROM plugin_versions WHERE plugin = 'p'").unwrap(), [[Some(h1.clone())]]);

    // The operator deploys v2 to A as well and adopts it once; each instance
    // takes it at its reload.
    versioned_plugin(&a, marks.path(), "v2");
    let (code, text) = run(&a, &["plugin", "adopt", "p"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains(&h2) && text.contains(&format!("in place of {h1}")), "{text}");
    assert_eq!(db.query("SELECT hash FROM plugin_versions WHERE plugin = 'p'").unwrap(), [[Some(h2.clone())]]);
    for d in [&da, &dbb] {
        let r = d.post("/api/plugins/p/reload", "");
        assert_eq!(r.status, 200, "{}", r.body);
        let status = plugin_p(&d.get("/api/plugins").json());
        assert_eq!((&status["state"], &status["content_hash"]), (&json!("loaded"), &json!(h2)), "{status}");
    }
    for site in [&a, &b] {
        let (code, text) = run(site, &["doctor"]);
        assert_eq!(code, Some(0), "{text}");
    }
    let r = dbb.post("/api/agents/a1/ingest", &ingest);
    assert!(recalled(&r.json()).contains(&"from v2".to_owned()), "{}", r.body);
    assert!(marks.path().join("v2").exists(), "B runs p again, at the fleet's version");
}
