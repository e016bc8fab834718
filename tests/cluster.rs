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
