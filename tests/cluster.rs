//! Several ctxhost instances on one PostgreSQL store (`[store] url`): what
//! one instance acknowledged, every other one sees. Each test starts real
//! `ctxhost serve`/`sidecar` processes on a fresh database of the test
//! process's throw-away cluster (`util::pg`).

use std::time::Duration;

use serde_json::{Value, json};

use crate::util::pg;
use crate::util::site::Site;
use crate::util::{ctxhost, within, write};

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

/// `ctxhost serve`'s change-feed listener of the daemon with `pid`, as the
/// database sees it: the backend pids of its connections.
fn listeners(db: &pg::Database, pid: i32) -> Vec<String> {
    db.query(&format!("SELECT pid FROM pg_stat_activity WHERE application_name = 'ctxhost-listen-{pid}'"))
        .unwrap()
        .into_iter()
        .filter_map(|row| row[0].clone())
        .collect()
}

fn signal(d: &crate::util::http::Daemon, sig: i32) {
    // SAFETY: kill(2) with the pid of a child this test owns and a valid signal.
    assert_eq!(unsafe { libc::kill(d.pid(), sig) }, 0);
}

/// The `(key, old, new)` of each `config_changed` a site's `watcher` got.
fn changed(site: &Site) -> Vec<(String, Value, Value)> {
    site.log("watcher")
        .into_iter()
        .map(|c| (c["key"].as_str().unwrap_or_default().to_owned(), c["old"].clone(), c["new"].clone()))
        .collect()
}

/// A config change through instance A reaches `config_changed` of the
/// plugin on instance B once per change and in order — over LISTEN/NOTIFY,
/// and by the catch-up read when B's listening connection was killed while
/// the changes were made (B stopped meanwhile, so it cannot have heard them).
#[test]
fn a_config_change_through_one_instance_fires_config_changed_on_every_other_once_in_order() {
    let db = pg::database();
    let (a, b) = (site_on(&db.url), site_on(&db.url));
    for site in [&a, &b] {
        site.python(
            "watcher",
            "[agent_config]\nLIMIT = { type = \"int\", default = 3 }\n",
            &[("config_changed", "log(req)")],
        );
    }
    let (da, dbb) = (a.start(&[]), b.start(&[]));
    within(10, "B's change-feed listener", || listeners(&db, dbb.pid()).len() == 1);
    let put = |n: u32| {
        let r = da.send("PUT", "/api/plugins/watcher/config", Some(&format!(r#"{{"values":{{"LIMIT":{n}}}}}"#)));
        assert_eq!(r.status, 200, "{}", r.body);
    };
    let expect = |upto: u32| -> Vec<(String, Value, Value)> {
        (4..=upto).map(|n| ("LIMIT".to_owned(), json!(n - 1), json!(n))).collect()
    };
    for n in 4..=6 {
        put(n);
    }
    within(10, "three config_changed calls on B", || b.log("watcher").len() >= 3);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(changed(&b), expect(6), "once each, in order, with the values A reported");
    assert_eq!(changed(&a), expect(6), "A fired its own, once each");
    assert_eq!(dbb.get("/api/plugins/watcher/config").json()["values"], json!({"LIMIT": 6}), "B's view");

    // B stopped, its listening connection killed: what A changes now, B
    // cannot be notified of.
    signal(&dbb, libc::SIGSTOP);
    let killed = listeners(&db, dbb.pid());
    assert_eq!(killed.len(), 1);
    db.execute(&format!("SELECT pg_terminate_backend({})", killed[0])).unwrap();
    within(10, "the listener's backend gone", || listeners(&db, dbb.pid()).is_empty());
    for n in 7..=9 {
        put(n);
    }
    signal(&dbb, libc::SIGCONT);
    within(10, "six config_changed calls on B", || b.log("watcher").len() >= 6);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(changed(&b), expect(9), "caught up after the reconnect: once each, in order");
    assert_eq!(changed(&a), expect(9));
    let relistening = listeners(&db, dbb.pid());
    assert!(relistening.len() == 1 && relistening != killed, "a new connection listens: {relistening:?}");
    assert_eq!(dbb.get("/api/plugins/watcher/config").json()["values"], json!({"LIMIT": 9}));
}

/// The two instances of a site pair, each running the `tagger` plugin
/// (every message tagged, every call logged).
fn tagged_pair(db: &pg::Database, manifest: &str, hook: &str) -> (Site, Site) {
    let (a, b) = (site_on(&db.url), site_on(&db.url));
    for site in [&a, &b] {
        site.python("tagger", manifest, &[("message_received", hook)]);
    }
    (a, b)
}

/// Disable / enable through one instance take effect on the other within
/// 2 s: it stops calling the plugin, then calls it again.
#[test]
fn disable_and_enable_through_one_instance_take_effect_on_another_within_2_s() {
    let db = pg::database();
    let (a, b) =
        tagged_pair(&db, "", "log(req['text'])\nreply = {'action': 'replace', 'value': req['text'] + ' tagged'}");
    let (da, dbb) = (a.start(&[]), b.start(&[]));
    within(10, "B's change-feed listener", || listeners(&db, dbb.pid()).len() == 1);
    let say =
        |d: &crate::util::http::Daemon| d.post("/api/agents/a1/messages", r#"{"text":"hi"}"#).json()["text"].clone();
    assert_eq!(say(&dbb), "hi tagged");
    let r = da.post("/faust/admin/plugins/tagger/disable", "");
    assert_eq!(r.status, 200, "{}", r.body);
    within(2, "B leaving the plugin out", || say(&dbb) == "hi");
    let calls = b.log("tagger").len();
    assert_eq!(say(&dbb), "hi");
    assert_eq!(say(&da), "hi");
    assert_eq!(b.log("tagger").len(), calls, "B no longer calls it");

    // Enabled again with the CLI of A's home: through the store, no daemon.
    a.ctxhost(&["plugin", "enable", "tagger"]);
    within(2, "B calling the plugin again", || say(&dbb) == "hi tagged");
    within(2, "A calling the plugin again", || say(&da) == "hi tagged");
}

/// A grant recorded through one instance's home (`ctxhost plugin grant`
/// with the store URL) is applied by a running instance within 2 s: the
/// plugin's `${VAR}` now reads the host variable the grant allows. The
/// grant is in the store, in neither home's grants.toml.
#[test]
fn a_grant_through_one_instance_is_applied_by_another_within_2_s() {
    let db = pg::database();
    let (a, b) = (site_on(&db.url), site_on(&db.url));
    for site in [&a, &b] {
        site.python(
            "envy",
            "[env]\nSEEN = \"${CTXHOST_T_CLUSTER_SECRET}\"\n",
            &[("communicate", "reply = {'seen': os.environ.get('SEEN', '')}")],
        );
    }
    let dbb = b.start(&[("CTXHOST_T_CLUSTER_SECRET", "s3cr3t")]);
    within(10, "B's change-feed listener", || listeners(&db, dbb.pid()).len() == 1);
    let seen = || dbb.post("/faust/plugins/envy/communicate", "{}").json()["seen"].clone();
    assert_eq!(seen(), "", "not granted yet");
    a.ctxhost(&["plugin", "grant", "envy", "--env", "CTXHOST_T_CLUSTER_SECRET"]);
    within(2, "B applying the grant", || seen() == "s3cr3t");
    for site in [&a, &b] {
        assert!(!site.home().join("grants.toml").exists(), "the grant is in the store");
    }
    let rows = db.query("SELECT plugin, grant_json FROM plugin_grants").unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(rows[0][1].as_deref().unwrap().contains("CTXHOST_T_CLUSTER_SECRET"), "{rows:?}");
}

/// A reload through one instance (`POST /api/plugins/{name}/reload`)
/// reloads the plugin on every other from its own files within 2 s.
#[test]
fn a_reload_through_one_instance_reloads_the_plugin_on_another_within_2_s() {
    let db = pg::database();
    // The tag is fixed at load (`[env]`): only a reload shows a new one.
    let tag = "reply = {'action': 'replace', 'value': req['text'] + ' ' + os.environ['TAG']}";
    let (a, b) = tagged_pair(&db, "[env]\nTAG = \"v1\"\n", tag);
    let (da, dbb) = (a.start(&[]), b.start(&[]));
    within(10, "B's change-feed listener", || listeners(&db, dbb.pid()).len() == 1);
    let say =
        |d: &crate::util::http::Daemon| d.post("/api/agents/a1/messages", r#"{"text":"hi"}"#).json()["text"].clone();
    assert_eq!(say(&dbb), "hi v1");
    // Both homes get the new version; only A is told to reload.
    for site in [&a, &b] {
        site.python("tagger", "[env]\nTAG = \"v2\"\n", &[("message_received", tag)]);
    }
    assert_eq!(say(&dbb), "hi v1", "B runs what it loaded");
    let r = da.post("/api/plugins/tagger/reload", "");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(say(&da), "hi v2");
    within(2, "B reloading", || say(&dbb) == "hi v2");
}
