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
/// Two homes on `db` whose stack is plugin `p` at `v1` (marks in `marks`).
fn versioned_pair(db: &pg::Database, marks: &std::path::Path) -> (Site, Site) {
    let (a, b) = (site_on(&db.url), site_on(&db.url));
    for site in [&a, &b] {
        write(
            &site.home().join("config.toml"),
            &format!("[store]\nurl = \"{}\"\n[context_engine]\nplugin = \"p\"\n", db.url),
        );
        versioned_plugin(site, marks, "v1");
    }
    (a, b)
}

/// The first instance's files are the fleet's version (recorded in the
/// store); the second says so in `doctor`, `plugin list` and
/// `/api/plugins`, naming both hashes, and never runs its changed script.
/// Once the operator deploys the new files everywhere and adopts them
/// (`ctxhost plugin adopt`), a reload on each brings both to that version.
#[test]
fn an_instance_whose_plugin_files_differ_refuses_the_plugin_until_the_fleet_agrees() {
    let db = pg::database();
    let marks = tempfile::tempdir().unwrap();
    let (a, b) = versioned_pair(&db, marks.path());
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
    let ingest = json!({"message": "anything?"}).to_string();
    // An ingest through B is refused, not served without p (503, a retry
    // later, both hashes and the way out); its changed script never runs.
    let r = dbb.post("/api/agents/a1/ingest", &ingest);
    assert_refused(&r, "ingest", &h2, &h1);
    assert!(!marks.path().join("v2").exists(), "B ran its changed script");
    // A call p takes no part in is served as usual.
    let r = dbb.post("/api/agents/a1/assemble", &json!({"messages": [{"role": "user", "content": "hi"}]}).to_string());
    assert_eq!(r.status, 200, "{}", r.body);
    assert_degraded(&dbb, &h2, &h1);
    assert_eq!(da.get("/healthz").status, 200, "A serves every plugin");
    // A serves p as before.
    let r = da.post("/api/agents/a1/ingest", &ingest);
    assert!(recalled(&r.json()).contains(&"from v1".to_owned()), "{}", r.body);
    assert!(marks.path().join("v1").exists());
    assert_eq!(db.query("SELECT hash FROM plugin_versions WHERE plugin = 'p'").unwrap(), [[Some(h1.clone())]]);

    // The operator deploys v2 to A as well and reloads it through A: A's
    // files become the fleet's version, and B, told through the store,
    // reloads and now agrees.
    versioned_plugin(&a, marks.path(), "v2");
    let r = da.post("/api/plugins/p/reload", "");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(db.query("SELECT hash FROM plugin_versions WHERE plugin = 'p'").unwrap(), [[Some(h2.clone())]]);
    let loaded_at = |d: &crate::util::http::Daemon, hash: &str| {
        let status = plugin_p(&d.get("/api/plugins").json());
        status["state"] == "loaded" && status["content_hash"] == hash
    };
    assert!(loaded_at(&da, &h2));
    crate::util::within(2, "B reloading p at the fleet's version", || loaded_at(&dbb, &h2));
    for site in [&a, &b] {
        let (code, text) = run(site, &["doctor"]);
        assert_eq!(code, Some(0), "{text}");
    }
    let r = dbb.post("/api/agents/a1/ingest", &ingest);
    assert!(recalled(&r.json()).contains(&"from v2".to_owned()), "{}", r.body);
    assert!(marks.path().join("v2").exists(), "B runs p again, at the fleet's version");
    assert_eq!(dbb.get("/healthz").status, 200, "B is healthy again");

    // Without a daemon: `ctxhost plugin adopt` records a home's files as the
    // fleet's version; the other home's report now names the difference.
    versioned_plugin(&a, marks.path(), "v3");
    let (code, text) = run(&a, &["plugin", "adopt", "p"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains(&format!("in place of {h2}")), "{text}");
    let h3 = db.query("SELECT hash FROM plugin_versions WHERE plugin = 'p'").unwrap()[0][0].clone().unwrap();
    assert!(h3 != h2 && text.contains(&h3), "{text}");
    let (code, text) = run(&b, &["doctor"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains(&h3) && text.contains(&h2), "{text}");
}

/// `r` is a call of `hook` refused because plugin `p`'s files here hash to
/// `here` while the fleet runs `fleet`: 503, `Retry-After`, the distinct
/// kind, both hashes and what to do.
fn assert_refused(r: &crate::util::http::Response, hook: &str, here: &str, fleet: &str) {
    assert_eq!(r.status, 503, "{}", r.body);
    let retry = r.header("retry-after").unwrap_or_else(|| panic!("no Retry-After: {:?}", r.headers));
    assert!(retry.parse::<u32>().is_ok_and(|s| s > 0), "{retry}");
    let body = r.json();
    assert_eq!(
        (&body["kind"], &body["plugin"], &body["hook"], &body["content_hash"], &body["fleet_hash"]),
        (&json!("plugin_version_mismatch"), &json!("p"), &json!(hook), &json!(here), &json!(fleet)),
        "{body}"
    );
    let error = body["error"].as_str().unwrap();
    assert!(error.contains(here) && error.contains(fleet), "{error}");
    let fix = body["fix"].as_str().unwrap();
    assert!(fix.contains("POST /api/plugins/p/reload") && fix.contains("ctxhost plugin adopt p"), "{fix}");
}

/// `/healthz` of `d` says it is degraded: 503, plugin `p` refused with both hashes.
fn assert_degraded(d: &crate::util::http::Daemon, here: &str, fleet: &str) {
    let r = d.get("/healthz");
    assert_eq!(r.status, 503, "{}", r.body);
    let body = r.json();
    assert_eq!(body["status"], "degraded", "{body}");
    let refused = body["refused"].as_array().unwrap();
    assert_eq!(refused.len(), 1, "{body}");
    assert_eq!((&refused[0]["plugin"], &refused[0]["content_hash"]), (&json!("p"), &json!(here)), "{body}");
    assert_eq!(refused[0]["fleet_hash"], fleet, "{body}");
}

/// A and B run the same `p`; B's files change under it (nothing looks at
/// them yet); the fleet's version is adopted through A (`ctxhost plugin
/// adopt` on A's home: the change feed tells every instance). B re-hashes
/// its files and refuses p within 2 s (its changed script no longer runs)
/// while A serves on; B's files fixed and reloaded, it resumes.
#[test]
fn a_running_instance_re_checks_its_files_when_the_fleet_adopts_a_version() {
    let db = pg::database();
    let marks = tempfile::tempdir().unwrap();
    let (a, b) = versioned_pair(&db, marks.path());
    let (da, dbb) = (a.start(&[]), b.start(&[]));
    within(10, "B's change-feed listener", || listeners(&db, dbb.pid()).len() == 1);
    let h1 = plugin_p(&da.get("/api/plugins").json())["content_hash"].as_str().unwrap().to_owned();
    let ingest = json!({"message": "anything?"}).to_string();
    let r = dbb.post("/api/agents/a1/ingest", &ingest);
    assert!(recalled(&r.json()).contains(&"from v1".to_owned()), "{}", r.body);
    assert_eq!(dbb.get("/healthz").status, 200);

    versioned_plugin(&b, marks.path(), "v2");
    let (code, text) = run(&a, &["plugin", "adopt", "p"]);
    assert_eq!(code, Some(0), "{text}");
    // Until B re-checks, its one-shot hook runs the files on disk (what the
    // re-check is for); from the refusal on, never.
    within(2, "B refusing p", || dbb.post("/api/agents/a1/ingest", &ingest).status == 503);
    let _ = std::fs::remove_file(marks.path().join("v2"));
    let h2 = plugin_p(&dbb.get("/api/plugins").json())["content_hash"].as_str().unwrap().to_owned();
    assert_ne!(h1, h2);
    assert_refused(&dbb.post("/api/agents/a1/ingest", &ingest), "ingest", &h2, &h1);
    assert_degraded(&dbb, &h2, &h1);
    assert!(!marks.path().join("v2").exists(), "B ran its changed script after refusing p");
    let r = da.post("/api/agents/a1/ingest", &ingest);
    assert!(recalled(&r.json()).contains(&"from v1".to_owned()), "A serves on: {}", r.body);
    assert_eq!(da.get("/healthz").status, 200);

    // B's files fixed and reloaded: it resumes, at the fleet's version.
    versioned_plugin(&b, marks.path(), "v1");
    let r = dbb.post("/api/plugins/p/reload", "");
    assert_eq!(r.status, 200, "{}", r.body);
    let r = dbb.post("/api/agents/a1/ingest", &ingest);
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(recalled(&r.json()).contains(&"from v1".to_owned()), "{}", r.body);
    assert_eq!(dbb.get("/healthz").status, 200);
    assert_eq!(db.query("SELECT hash FROM plugin_versions WHERE plugin = 'p'").unwrap(), [[Some(h1)]]);
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

/// Plugin `p` for the sidecar test: a bash ingest hook recalling its `TAG`
/// (`[env]`, fixed at load), its `LIMIT` (`[agent_config]`, from the config
/// file ctxhost writes at load) and `SEEN` (a host variable, once granted).
fn sidecar_plugin(site: &Site, tag: &str) {
    write(
        &site.plugin_dir("p").join("plugin.toml"),
        &format!(
            "name = \"p\"\nversion = \"1.0.0\"\n[env]\nTAG = \"{tag}\"\nSEEN = \"${{CTXHOST_T_SIDECAR_SECRET}}\"\n\
             [agent_config]\nLIMIT = {{ type = \"int\", default = 3 }}\n[hooks]\nruntime = \"bash\"\n\
             ingest = \"hooks/ingest.sh\"\n"
        ),
    );
    write(
        &site.plugin_dir("p").join("hooks/ingest.sh"),
        "cat > /dev/null\ncfg=$(<\"$LIBREFANG_PLUGIN_CONFIG\")\nlimit=none\n\
         [[ $cfg =~ \\\"LIMIT\\\":\\ *([0-9]+) ]] && limit=${BASH_REMATCH[1]}\n\
         printf '{\"type\":\"ingest_result\",\"memories\":[{\"content\":\"p %s limit=%s seen=%s\"}]}\\n' \"$TAG\" \"$limit\" \"$SEEN\"\n",
    );
}

/// One sidecar ingest; its reply.
fn sidecar_ingest(sidecar: &mut crate::sidecar::Sidecar, id: &mut u64) -> Value {
    *id += 1;
    sidecar.send(&crate::sidecar::ingest(*id, "6f9619ff-8b86-4011-b42d-00c04fc964ff", "anything?"));
    let reply = sidecar.next();
    assert_eq!(reply["id"], json!(*id), "{reply}");
    reply
}

/// What p recalled in a sidecar reply (`None`: p took no part).
fn from_p(reply: &Value) -> Option<String> {
    reply["ok"]["recalled_memories"]
        .as_array()
        .unwrap_or_else(|| panic!("{reply}"))
        .iter()
        .filter_map(|m| m["content"].as_str())
        .find(|c| c.starts_with("p "))
        .map(str::to_owned)
}

/// A `ctxhost sidecar` on the store follows the change feed as `serve`
/// does: a config value set, a grant, a disable and an enable, a reload
/// through a `serve` instance (or its home's CLI) reach the sidecar's stack
/// within 2 s; a version adopted elsewhere that its files do not match
/// makes it refuse p's calls with an error reply naming both hashes.
#[test]
fn a_sidecar_on_the_store_follows_changes_made_through_serve() {
    let db = pg::database();
    let (a, c) = (site_on(&db.url), site_on(&db.url));
    write(&c.home().join("config.toml"), &format!("[store]\nurl = \"{}\"\n[context_engine]\nplugin = \"p\"\n", db.url));
    for site in [&a, &c] {
        sidecar_plugin(site, "v1");
    }
    let da = a.start(&[]);
    let user_home = tempfile::tempdir().unwrap();
    let mut sc =
        crate::sidecar::Sidecar::start_with(c.home(), user_home.path(), &[], &[("CTXHOST_T_SIDECAR_SECRET", "s3cr3t")]);
    let mut id = 0;
    assert_eq!(from_p(&sidecar_ingest(&mut sc, &mut id)).as_deref(), Some("p v1 limit=3 seen="));
    within(10, "the sidecar's change-feed listener", || listeners(&db, sc.pid()).len() == 1);
    let mut says = |want: Option<&str>, what: &str| {
        within(2, what, || from_p(&sidecar_ingest(&mut sc, &mut id)).as_deref() == want);
    };

    let r = da.send("PUT", "/api/plugins/p/config", Some(r#"{"values":{"LIMIT":7}}"#));
    assert_eq!(r.status, 200, "{}", r.body);
    says(Some("p v1 limit=7 seen="), "the sidecar taking the config value");
    a.ctxhost(&["plugin", "grant", "p", "--env", "CTXHOST_T_SIDECAR_SECRET"]);
    says(Some("p v1 limit=7 seen=s3cr3t"), "the sidecar applying the grant");
    a.ctxhost(&["plugin", "disable", "p"]);
    says(None, "the sidecar leaving p out");
    a.ctxhost(&["plugin", "enable", "p"]);
    says(Some("p v1 limit=7 seen=s3cr3t"), "the sidecar calling p again");
    for site in [&a, &c] {
        sidecar_plugin(site, "v2");
    }
    let r = da.post("/api/plugins/p/reload", "");
    assert_eq!(r.status, 200, "{}", r.body);
    says(Some("p v2 limit=7 seen=s3cr3t"), "the sidecar reloading p");

    // The sidecar's files change; the fleet's version (A's) is adopted.
    sidecar_plugin(&c, "v3");
    let (code, text) = run(&a, &["plugin", "adopt", "p"]);
    assert_eq!(code, Some(0), "{text}");
    let refused = |reply: &Value| reply["kind"] == "plugin_version_mismatch";
    within(2, "the sidecar refusing p", || refused(&sidecar_ingest(&mut sc, &mut id)));
    let reply = sidecar_ingest(&mut sc, &mut id);
    let fleet = db.query("SELECT hash FROM plugin_versions WHERE plugin = 'p'").unwrap()[0][0].clone().unwrap();
    assert_eq!(
        (&reply["plugin"], &reply["hook"], &reply["fleet_hash"]),
        (&json!("p"), &json!("ingest"), &json!(fleet))
    );
    let here = reply["content_hash"].as_str().unwrap_or_else(|| panic!("{reply}"));
    assert_ne!(here, fleet);
    let error = reply["error"].as_str().unwrap();
    assert!(error.contains(here) && error.contains(&fleet) && error.contains("ctxhost plugin adopt p"), "{error}");
    assert!(reply.get("ok").is_none(), "{reply}");
}

// ---- lease stream: triggers, schedules and the journal across instances ----

/// How many records of each key `of` the sites' logs of plugin `name` hold,
/// and which keys the site `marked` recorded.
fn tally(
    sites: &[&Site],
    name: &str,
    of: impl Fn(&Value) -> Option<String>,
) -> std::collections::BTreeMap<String, usize> {
    let mut n = std::collections::BTreeMap::new();
    for site in sites {
        for line in site.log(name) {
            if let Some(k) = of(&line) {
                *n.entry(k).or_insert(0) += 1;
            }
        }
    }
    n
}

fn keys_in(site: &Site, name: &str, of: impl Fn(&Value) -> Option<String>) -> std::collections::BTreeSet<String> {
    site.log(name).iter().filter_map(&of).collect()
}

/// The trigger recorder: `trigger_fire` logs `start` at once, then (for a
/// time trigger) works for a while and logs `done`; an event trigger's
/// firing logs its event's `n`.
fn trigger_recorder(site: &Site) {
    site.python(
        "rec",
        "",
        &[(
            "trigger_fire",
            "t = req['trigger']\n\
             if t.get('type') == 'event':\n    log({'event': t['id'] + '#' + str(t['event_payload']['n'])})\n\
             else:\n    log({'start': t['id'], 'firing': req['firing_id']})\n    time.sleep(1.5)\n    log({'done': t['id']})",
        )],
    );
}

/// Three instances fire 40 due triggers while one of them is SIGKILLed
/// half-way and a fourth starts: every trigger fires, and each exactly once
/// — except one the killed instance had claimed and not settled, which
/// another instance fires again after the claim ran out (at least once is
/// the promise; the re-firing is what keeps it from being lost), with the
/// same firing id as its first try (`<id>@<due secs>`), which the receiver
/// deduplicates by. Events posted to any instance fire each listening
/// trigger once.
#[test]
fn due_triggers_fire_once_across_instances_that_start_and_die() {
    let db = pg::database();
    let sites: Vec<Site> = (0..4).map(|_| site_on(&db.url)).collect();
    for s in &sites {
        trigger_recorder(s);
    }
    // B first and alone, so it surely holds claims when it dies (on a
    // loaded machine A and C could otherwise take every trigger first).
    let mut b = Some(sites[1].start(&[]));
    const N: usize = 40;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    for i in 0..N {
        let t = json!({"id": format!("t{i:02}"), "type": "datetime", "target": now + 2 + (i as u64 % 6)});
        let r = b.as_ref().unwrap().post("/api/triggers", &t.to_string());
        assert_eq!(r.status, 201, "{}", r.body);
    }
    within(30, "B's first firings", || {
        !keys_in(&sites[1], "rec", |l| l["start"].as_str().map(str::to_owned)).is_empty()
    });
    let (a, c) = (sites[0].start(&[]), sites[2].start(&[]));
    // Half-way: B dies holding claims (each firing takes 1.5 s), D starts.
    std::thread::sleep(Duration::from_millis(700));
    drop(b.take()); // SIGKILL
    let killed_at = std::time::Instant::now();
    let d = sites[3].start(&[]);
    let all: Vec<&Site> = sites.iter().collect();
    let done = |l: &Value| l["done"].as_str().map(str::to_owned);
    within(60, "every trigger done", || tally(&all, "rec", done).len() == N);
    // Past any claim that could still run out and fire again.
    std::thread::sleep(Duration::from_secs(8).saturating_sub(killed_at.elapsed().min(Duration::from_secs(8))));
    std::thread::sleep(Duration::from_secs(2));
    let starts = tally(&all, "rec", |l| l["start"].as_str().map(str::to_owned));
    let on_b = keys_in(&sites[1], "rec", |l| l["start"].as_str().map(str::to_owned));
    assert_eq!(starts.len(), N, "every trigger fired: {starts:?}");
    // Every try of a firing carries its id: the trigger's id and due time.
    let due: std::collections::BTreeMap<String, u64> =
        (0..N).map(|i| (format!("t{i:02}"), now + 2 + (i as u64 % 6))).collect();
    for site in &all {
        for l in site.log("rec").iter().filter(|l| l.get("start").is_some()) {
            let id = l["start"].as_str().unwrap();
            assert_eq!(l["firing"], format!("{id}@{}", due[id]), "{l}");
        }
    }
    // The embedder's fired records carry it too.
    let fired: Vec<Value> =
        [&a, &c, &d].iter().flat_map(|x| x.get("/api/triggers/fired").json().as_array().cloned().unwrap()).collect();
    assert!(!fired.is_empty(), "the live instances delivered some");
    for t in &fired {
        let id = t["id"].as_str().unwrap();
        assert_eq!(t["firing_id"], format!("{id}@{}", due[id]), "{t}");
    }
    let mut taken_over = 0;
    for (id, n) in &starts {
        match n {
            1 => {}
            2 if on_b.contains(id) => taken_over += 1,
            _ => panic!("trigger {id} fired {n} times (on the killed instance: {})", on_b.contains(id)),
        }
    }
    // B held claims when it died: each was fired again elsewhere, or B's
    // own firing never started; either way nothing is left in the store.
    let left = db.query("SELECT count(*) FROM triggers").unwrap();
    assert_eq!(left, [[Some("0".to_owned())]], "every firing settled");
    eprintln!("triggers: {N} fired, {taken_over} re-fired after the killed instance's claim ran out");

    // Events: three triggers on `deploy`, ten events through three instances.
    for k in 0..3 {
        let t = json!({"id": format!("e{k}"), "type": "event", "event_name": "deploy"});
        assert_eq!(c.post("/api/triggers", &t.to_string()).status, 201);
    }
    let live = [&a, &c, &d];
    for n in 0..10 {
        let r = live[n % 3].post("/api/events/deploy", &json!({"n": n}).to_string());
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.json()["fired"].as_array().map(Vec::len), Some(3), "{}", r.body);
    }
    let events = tally(&all, "rec", |l| l["event"].as_str().map(str::to_owned));
    assert_eq!(events.len(), 30, "{events:?}");
    assert!(events.values().all(|n| *n == 1), "one event, one firing of each listening trigger: {events:?}");
}

/// Two instances on `db` with a plugin whose 1 s schedule logs each run's
/// time, started, once the schedule ran somewhere.
fn ticking_pair(db: &pg::Database) -> (Vec<Site>, Vec<Option<crate::util::http::Daemon>>) {
    let sites: Vec<Site> = (0..2).map(|_| site_on(&db.url)).collect();
    for s in &sites {
        s.python(
            "ticker",
            "[[schedules]]\nid = \"tick\"\ninterval_secs = 1\n",
            &[("run_schedule", "log({'id': req['id'], 'at': time.time()})")],
        );
    }
    let daemons = sites.iter().map(|s| Some(s.start(&[]))).collect();
    within(20, "the first run", || sites.iter().any(|s| !runs(s).is_empty()));
    (sites, daemons)
}

/// When the ticker of `site` ran (unix seconds).
fn runs(site: &Site) -> Vec<f64> {
    site.log("ticker").iter().filter_map(|l| l["at"].as_f64()).collect()
}

/// A 1 s schedule on two instances runs about once a second in all (not
/// twice), on the lease's holder; when the holder is SIGKILLed, the other
/// takes the schedule over within the lease (period + 2 s) and a period.
#[test]
fn a_schedule_runs_on_one_instance_and_moves_when_it_dies() {
    let db = pg::database();
    let (sites, mut daemons) = ticking_pair(&db);
    let first = sites.iter().flat_map(runs).fold(f64::INFINITY, f64::min);
    std::thread::sleep(Duration::from_secs(5));
    let window = |s: &Site, from: f64, to: f64| runs(s).into_iter().filter(|t| *t >= from && *t < to).count();
    let total: usize = sites.iter().map(|s| window(s, first, first + 5.0)).sum();
    assert!((4..=6).contains(&total), "about 5 runs in 5 s across both instances, not 10: {total}");
    let holder = if window(&sites[0], first + 2.0, first + 5.0) > 0 { 0 } else { 1 };
    assert_eq!(window(&sites[1 - holder], first + 2.0, first + 5.0), 0, "only the holder runs it");

    drop(daemons[holder].take()); // SIGKILL
    let killed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let other = &sites[1 - holder];
    within(15, "the other instance's first run", || runs(other).iter().any(|t| *t > killed));
    let took_over = runs(other).into_iter().find(|t| *t > killed).unwrap_or(f64::INFINITY) - killed;
    assert!(took_over <= 3.0 + 1.0 + 1.0, "taken over after {took_over:.1} s (lease 3 s + period 1 s + a tick)");
    std::thread::sleep(Duration::from_secs(3));
    let after = window(other, killed, killed + 100.0);
    assert!(after >= 3, "it keeps running on the other instance: {after}");
    eprintln!("schedule: {total} runs in 5 s on two instances; taken over {took_over:.1} s after the kill");
    drop(daemons);
}

/// A schedule's holder stopped cleanly (SIGTERM) gives its lease back: the
/// other instance takes the schedule over at its next due time, within one
/// period, not when the lease (period + 2 s) would have run out.
#[test]
fn a_schedule_moves_within_one_period_when_its_holder_shuts_down_cleanly() {
    let db = pg::database();
    let (sites, mut daemons) = ticking_pair(&db);
    std::thread::sleep(Duration::from_secs(3));
    let now = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let recent = |s: &Site, since: f64| runs(s).into_iter().filter(|t| *t >= since).count();
    let holder = if recent(&sites[0], now() - 2.0) > 0 { 0 } else { 1 };
    assert_eq!(recent(&sites[1 - holder], now() - 2.0), 0, "only the holder runs it");
    let held = db.query("SELECT holder FROM leases WHERE name = 'schedule:ticker/tick'").unwrap();
    assert_eq!(held.len(), 1, "{held:?}");

    let stopped = now();
    let (clean, stderr) = daemons[holder].take().unwrap().stop(); // SIGTERM
    assert!(clean, "a clean exit: {stderr}");
    assert!(stderr.contains("schedule leases given back for other instances: schedule:ticker/tick"), "{stderr}");
    let other = &sites[1 - holder];
    within(10, "the other instance's first run", || runs(other).iter().any(|t| *t > stopped));
    let took_over = runs(other).into_iter().find(|t| *t > stopped).unwrap_or(f64::INFINITY) - stopped;
    // Had the lease run out instead, the earliest takeover is 2 s after the
    // SIGTERM (renewed at most a period before it, it lasts period + 2 s).
    assert!(took_over < 2.0, "taken over {took_over:.2} s after the SIGTERM (within a period and a tick)");
    let now_held = db.query("SELECT holder FROM leases WHERE name = 'schedule:ticker/tick'").unwrap();
    assert_ne!(now_held, held, "the other instance holds it now");
    eprintln!("schedule: taken over {took_over:.2} s after the holder's SIGTERM");
    drop(daemons);
}

/// 32 clients send turns through three instances; one is SIGKILLed in the
/// middle. Every acknowledged turn reaches the plugin's after_turn (the
/// dead instance's journal entries are taken over by a live one) and is in
/// the built-in memory exactly once.
#[test]
fn kill_9_during_32_clients_after_turns_loses_no_acknowledged_turn() {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};
    let db = pg::database();
    let sites: Vec<Site> = (0..3).map(|_| site_on(&db.url)).collect();
    for s in &sites {
        s.python("rec", "", &[("after_turn", "time.sleep(0.2)\nlog({'turn': req['messages'][0]['content']})")]);
        write(
            &s.home().join("config.toml"),
            &format!("[store]\nurl = \"{}\"\n[context_engine]\nplugin = \"rec\"\n", db.url),
        );
    }
    let mut daemons: Vec<Option<crate::util::http::Daemon>> = sites.iter().map(|s| Some(s.start(&[]))).collect();
    let addrs: Vec<String> = daemons.iter().map(|d| d.as_ref().unwrap().addr.clone()).collect();
    let b_dead = AtomicBool::new(false);
    let acked = Mutex::new(Vec::<(String, usize)>::new());
    const CLIENTS: usize = 32;
    const TURNS: usize = 6;
    std::thread::scope(|scope| {
        for c in 0..CLIENTS {
            let (addrs, b_dead, acked) = (&addrs, &b_dead, &acked);
            scope.spawn(move || {
                for n in 0..TURNS {
                    let mut at = (c + n) % 3;
                    if at == 1 && b_dead.load(Ordering::SeqCst) {
                        at = 2;
                    }
                    let text = format!("client {c} remembers that turn {n} is tagged c{c}n{n}");
                    let body = turn(&text);
                    let addr = addrs[at].clone();
                    // A request cut by the kill is not acknowledged (the client would retry).
                    let r = std::panic::catch_unwind(|| {
                        crate::util::http::request(&addr, "POST", "/api/agents/a1/after_turn", Some(&body), &[])
                    });
                    if let Ok(r) = r
                        && r.status == 200
                        && r.json() == json!({"type": "ok"})
                    {
                        acked.lock().unwrap().push((text, at));
                    }
                }
            });
        }
        // The kill: once B acknowledged a few turns, its plugin calls still running.
        within(60, "B's first acknowledged turns", || {
            acked.lock().unwrap().iter().filter(|(_, at)| *at == 1).count() >= 8
        });
        b_dead.store(true, Ordering::SeqCst);
        drop(daemons[1].take()); // SIGKILL
    });
    let acked = acked.into_inner().unwrap();
    let on_b = acked.iter().filter(|(_, at)| *at == 1).count();
    assert!(acked.len() >= CLIENTS * TURNS * 2 / 3, "most turns acknowledged: {}", acked.len());
    let all: Vec<&Site> = sites.iter().collect();
    let of = |l: &Value| l["turn"].as_str().map(str::to_owned);
    let start = std::time::Instant::now();
    loop {
        let seen = tally(&all, "rec", of);
        let missing: Vec<&(String, usize)> = acked.iter().filter(|(t, _)| !seen.contains_key(t)).collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "acknowledged turns that never reached after_turn: {missing:?}; the journal: {:?}",
            db.query("SELECT id, target, origin, owner, attempts, lease_until, dead_at, last_error, substr(payload, 1, 90) FROM journal_entries")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Entries the killed instance held may run twice (at least once is the
    // journal's promise); then one of the two runs is the killed instance's.
    let seen = tally(&all, "rec", of);
    let ran_on_b = keys_in(&sites[1], "rec", of);
    for (t, n) in &seen {
        assert!(*n == 1 || (*n == 2 && ran_on_b.contains(t)), "`{t}` reached after_turn {n} times");
    }
    let rows = db.query("SELECT content, count(*) FROM memory_items GROUP BY content").unwrap();
    let memories: std::collections::BTreeMap<String, String> =
        rows.into_iter().map(|r| (r[0].clone().unwrap_or_default(), r[1].clone().unwrap_or_default())).collect();
    for (t, _) in &acked {
        assert_eq!(memories.get(t).map(String::as_str), Some("1"), "`{t}` once in the built-in memory");
    }
    assert!(memories.values().all(|n| n == "1"), "no memory twice: {memories:?}");
    let twice = seen.values().filter(|n| **n == 2).count();
    // B died with after_turn calls under way (each takes 0.2 s; the kill
    // came right after its last acknowledgement): live instances ran them.
    let taken_over = acked.iter().filter(|(t, at)| *at == 1 && !ran_on_b.contains(t)).count();
    assert!(taken_over >= 1, "some of the killed instance's entries were taken over");
    eprintln!(
        "journal: {} turns acknowledged ({on_b} by the killed instance, {taken_over} of them run by another), \
         all reached the plugin; {twice} ran twice",
        acked.len()
    );
    drop(daemons);
}
