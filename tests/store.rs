//! The state store (`<home>/state.db`) through `ctxhost serve`, `ctxhost
//! hook` and `ctxhost plugin`: the JSON files of the old layout imported at
//! the first start and renamed aside, a corrupt one kept and reported, a
//! failed write leaving what the daemon shows and what is on disk equal, and
//! two processes sharing the one store.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::agent::{calls, service_worker};
use crate::util;
use crate::util::pg;
use crate::util::site::Site;
use crate::util::{ctxhost, write};

/// A jsonrpc worker plugin (`agent::service_worker`) with one config field.
fn worker_with_config(site: &Site, name: &str) {
    service_worker(site, name);
    let manifest = site.plugin_dir(name).join("plugin.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    write(&manifest, &format!("{text}[agent_config]\nLIMIT = {{ type = \"int\", default = 3 }}\n"));
}

/// `ctxhost serve` on `home` that must fail to start: its stderr.
fn serve_fails(home: &Path) -> String {
    let out = ctxhost()
        .arg("--home")
        .arg(home)
        .args(["serve", "--addr", "127.0.0.1:0"])
        .timeout(Duration::from_secs(20))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "serve started:\n{stderr}");
    stderr
}

/// The files of the old layout, written by hand as the JSON-file services
/// and `ctxhost plugin disable` wrote them.
fn old_layout(home: &Path) {
    let agent = home.join("agent");
    write(
        &agent.join("vfs.json"),
        &json!({
            "/plugins/notes/old.md": {"kind": "file", "content": "from the json days", "owner": "notes"},
            "/shared/readme": {"kind": "file", "content": "host wrote this", "owner": "host"},
        })
        .to_string(),
    );
    write(
        &agent.join("triggers.json"),
        &json!({"nightly": {
            "trigger": {"id": "nightly", "type": "event", "event_name": "deploy", "plugin": "notes", "priority": 2},
            "created": 1_700_000_000u64,
            "fired": null,
        }})
        .to_string(),
    );
    write(&agent.join("plugins/notes/agent_config.json"), r#"{"LIMIT": 9}"#);
    write(
        &agent.join("plugins/notes/agent_storage.json"),
        r#"{"global": {"count": 41}, "sessions": {"a1": {"mood": "calm"}}}"#,
    );
    write(&home.join("plugins-state.toml"), "# written by ctxhost\n\ndisabled = [\"off\"]\n");
}

const OLD_FILES: [&str; 5] = [
    "agent/vfs.json",
    "agent/triggers.json",
    "agent/plugins/notes/agent_config.json",
    "agent/plugins/notes/agent_storage.json",
    "plugins-state.toml",
];

#[test]
fn the_old_json_state_is_imported_at_the_first_start_and_renamed_aside() {
    let site = Site::new();
    worker_with_config(&site, "notes");
    service_worker(&site, "off");
    old_layout(site.home());

    let d = site.start(&[]);
    let vfs = d.get("/api/vfs?path=/plugins/notes/old.md").json();
    assert_eq!(vfs["content"], "from the json days", "{vfs}");
    assert_eq!(d.get("/api/vfs?path=/shared/readme").json()["content"], "host wrote this");
    let trigger = d.get("/api/triggers/nightly").json();
    assert_eq!((&trigger["plugin"], &trigger["priority"]), (&json!("notes"), &json!(2)), "{trigger}");
    assert_eq!(d.post("/api/events/deploy", "{}").json()["fired"][0]["id"], "nightly", "and it still fires");
    assert_eq!(d.get("/api/plugins/notes/config").json()["values"], json!({"LIMIT": 9}));
    let out = calls(
        &d,
        "notes",
        json!([
            ["storage.get", {"key": "count"}],
            ["storage.get", {"key": "mood", "scope": "session", "agent_id": "a1"}],
            ["config.get", {"key": "LIMIT"}],
            ["vfs.read", {"path": "/plugins/notes/old.md"}],
        ]),
    );
    assert_eq!(out, [json!({"ok": 41}), json!({"ok": "calm"}), json!({"ok": 9}), json!({"ok": "from the json days"})]);
    let agent_plugins = d.get("/api/agent/plugins").json();
    let names: Vec<&str> = agent_plugins.as_array().unwrap().iter().filter_map(|p| p["name"].as_str()).collect();
    assert!(names.contains(&"notes") && !names.contains(&"off"), "`off` stays disabled: {agent_plugins}");
    assert!(d.stop().0);

    for old in OLD_FILES {
        let file = site.home().join(old);
        assert!(!file.exists(), "{old} is still in place");
        assert!(site.home().join(format!("{old}.migrated")).is_file(), "{old} was not renamed aside");
    }
    // Kept, byte for byte.
    let kept = std::fs::read_to_string(site.home().join("agent/plugins/notes/agent_config.json.migrated")).unwrap();
    assert_eq!(kept, r#"{"LIMIT": 9}"#);

    // The store is the state now: a second start reads it, changes persist.
    let d = site.start(&[]);
    let out =
        calls(&d, "notes", json!([["storage.set", {"key": "count", "value": 42}], ["storage.get", {"key": "count"}]]));
    assert_eq!(out, [json!({"ok": null}), json!({"ok": 42})]);
    assert_eq!(d.get("/api/vfs?path=/plugins/notes/old.md").json()["content"], "from the json days");
    assert!(d.stop().0);
    let list = ctxhost().arg("--home").arg(site.home()).args(["plugin", "list", "--json"]).output().unwrap();
    let list: Value = serde_json::from_slice(&list.stdout).unwrap();
    let off = list.as_array().unwrap().iter().find(|p| p["name"] == "off").cloned().unwrap();
    assert_eq!(off["enabled"], false, "{off}");
}

#[test]
fn a_corrupt_old_file_is_kept_and_reported_and_nothing_is_imported() {
    let site = Site::new();
    worker_with_config(&site, "notes");
    service_worker(&site, "off");
    old_layout(site.home());
    let vfs = site.home().join("agent/vfs.json");
    write(&vfs, "{\"/plugins/notes/a\": {\"kind\": \"file\", ");

    let stderr = serve_fails(site.home());
    assert!(stderr.contains(&vfs.display().to_string()) && stderr.contains("EOF while parsing"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(&vfs).unwrap(),
        "{\"/plugins/notes/a\": {\"kind\": \"file\", ",
        "the corrupt file was overwritten"
    );
    for old in OLD_FILES {
        assert!(site.home().join(old).is_file(), "{old} was renamed although nothing could be imported");
    }

    // Fixed by the operator: everything goes in at the next start.
    write(&vfs, r#"{"/plugins/notes/a": {"kind": "file", "content": "fixed", "owner": "notes"}}"#);
    let d = site.start(&[]);
    assert_eq!(d.get("/api/vfs?path=/plugins/notes/a").json()["content"], "fixed");
    assert_eq!(d.get("/api/plugins/notes/config").json()["values"], json!({"LIMIT": 9}));
    assert!(d.stop().0);
    assert!(!vfs.exists() && site.home().join("agent/vfs.json.migrated").is_file());
}

/// Makes every write to `table` of the home's store fail, as a full disk
/// would: the database refuses mid-transaction.
fn break_writes(home: &Path, table: &str) {
    let db = rusqlite::Connection::open(home.join("state.db")).unwrap();
    db.busy_timeout(Duration::from_secs(10)).unwrap();
    for op in ["INSERT", "UPDATE", "DELETE"] {
        db.execute_batch(&format!(
            "CREATE TRIGGER broken_{table}_{op} BEFORE {op} ON {table} BEGIN SELECT RAISE(ABORT, 'disk says no'); END;"
        ))
        .unwrap();
    }
}

#[test]
fn a_failed_write_leaves_what_the_daemon_shows_and_the_disk_equal() {
    let site = Site::new();
    worker_with_config(&site, "notes");
    let d = site.start(&[]);
    let path = "/api/plugins/notes/config";
    assert_eq!(d.send("PUT", path, Some(r#"{"values":{"LIMIT":5}}"#)).status, 200);
    let out = calls(
        &d,
        "notes",
        json!([
            ["vfs.write", {"path": "/plugins/notes/f", "content": "old"}],
            ["storage.set", {"key": "k", "value": "old"}],
        ]),
    );
    assert_eq!(out, [json!({"ok": "/plugins/notes/f"}), json!({"ok": null})]);
    let view = site.home().join("data/notes/config.json");
    let view_before = std::fs::read_to_string(&view).unwrap();

    for table in ["plugin_config", "vfs_nodes", "plugin_storage"] {
        break_writes(site.home(), table);
    }
    let r = d.send("PUT", path, Some(r#"{"values":{"LIMIT":8}}"#));
    assert_eq!(r.status, 500, "{}", r.body);
    let error = r.json()["error"].as_str().unwrap().to_owned();
    assert!(error.contains("sqlite store, config_put") && error.contains("disk says no"), "{error}");
    let out = calls(
        &d,
        "notes",
        json!([
            ["config.set", {"key": "LIMIT", "value": 8}],
            ["vfs.write", {"path": "/plugins/notes/f", "content": "new"}],
            ["storage.set", {"key": "k", "value": "new"}],
            ["config.get", {"key": "LIMIT"}],
            ["vfs.read", {"path": "/plugins/notes/f"}],
            ["storage.get", {"key": "k"}],
        ]),
    );
    for (i, what) in ["config.set", "vfs.write", "storage.set"].iter().enumerate() {
        let err = out[i]["err"].as_str().unwrap_or_else(|| panic!("{what} did not fail: {out:?}"));
        assert!(err.contains("disk says no"), "{what}: {err}");
    }
    assert_eq!(out[3..], [json!({"ok": 5}), json!({"ok": "old"}), json!({"ok": "old"})], "memory as on disk");
    assert_eq!(d.get(path).json()["values"], json!({"LIMIT": 5}));
    assert_eq!(std::fs::read_to_string(&view).unwrap(), view_before, "the one-shot view did not move either");
    assert!(d.stop().0);

    let d = site.start(&[]);
    assert_eq!(d.get(path).json()["values"], json!({"LIMIT": 5}), "the disk agrees");
    let out = calls(&d, "notes", json!([["vfs.read", {"path": "/plugins/notes/f"}], ["storage.get", {"key": "k"}]]));
    assert_eq!(out, [json!({"ok": "old"}), json!({"ok": "old"})]);
    assert!(d.stop().0);
}

#[test]
fn another_process_writes_beside_a_running_daemon() {
    let site = Site::new();
    service_worker(&site, "notes");
    service_worker(&site, "other");
    let d = site.start(&[]);
    calls(&d, "notes", json!([["storage.set", {"key": "k", "value": "daemon"}]]));
    // `ctxhost hook` in its own process, on the same store, while the daemon runs.
    let request = json!({"payload": {"calls": [
        ["storage.get", {"key": "k"}],
        ["storage.set", {"key": "k", "value": "hook"}],
        ["vfs.write", {"path": "/plugins/notes/by-hook", "content": "hi"}],
    ]}, "agent_id": "a1"});
    let out = ctxhost()
        .arg("--home")
        .arg(site.home())
        .args(["hook", "notes", "communicate"])
        .write_stdin(request.to_string())
        .timeout(Duration::from_secs(30))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let reply: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(reply["results"][0], json!({"ok": "daemon"}), "{reply}");
    let out =
        calls(&d, "notes", json!([["storage.get", {"key": "k"}], ["vfs.read", {"path": "/plugins/notes/by-hook"}]]));
    assert_eq!(out, [json!({"ok": "hook"}), json!({"ok": "hi"})], "the daemon reads what the hook wrote");
    // And the operator's choice lands while it runs, without a lock file.
    ctxhost().arg("--home").arg(site.home()).args(["plugin", "disable", "other"]).assert().success();
    assert!(!site.home().join("plugins-state.toml.lock").exists());
    assert!(d.stop().0);
}

/// The throw-away cluster (`util::pg`): a fresh database per call, reachable
/// by the URL it gives, tables and rows kept apart between databases.
#[test]
fn the_pg_harness_gives_each_test_a_fresh_database() {
    let a = pg::database();
    let b = pg::database();
    assert_ne!(a.name, b.name);
    assert!(a.url.starts_with("postgres://postgres@/") && a.url.contains("?host=/"), "{}", a.url);
    // Through the URL, as the store will connect.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(&a.url, tokio_postgres::NoTls).await.unwrap();
        let driver = tokio::spawn(conn);
        client.batch_execute("CREATE TABLE notes (id INT PRIMARY KEY, body TEXT NOT NULL)").await.unwrap();
        client.execute("INSERT INTO notes VALUES ($1, $2)", &[&7i32, &"seven"]).await.unwrap();
        let row = client.query_one("SELECT body FROM notes WHERE id = $1", &[&7i32]).await.unwrap();
        assert_eq!(row.get::<_, String>(0), "seven");
        drop(client);
        driver.await.unwrap().unwrap();
    });
    assert_eq!(a.query("SELECT id, body FROM notes").unwrap(), [[Some("7".to_owned()), Some("seven".to_owned())]]);
    let err = b.query("SELECT * FROM notes").unwrap_err();
    assert!(err.contains("notes") && err.contains("does not exist"), "{err}");
    // Another role authenticates with its password; a wrong one is refused.
    let url = a.role("harness_user", "s3cret:/@pw");
    let wrong = url.replace("s3cret", "wrong");
    let refused = pg::cluster().execute_url(&wrong, "SELECT 1").unwrap_err();
    assert!(refused.contains("password authentication failed"), "{refused}");
    pg::cluster().execute_url(&url, "SELECT 1").unwrap();
    // The cluster runs unprivileged when the tests run as root.
    let uid = std::fs::read_to_string(format!("/proc/{}/status", pg::cluster().pid)).unwrap();
    let uid_line = uid.lines().find(|l| l.starts_with("Uid:")).unwrap().to_owned();
    if util::nobody::is_root() {
        assert!(uid_line.split_whitespace().nth(1) == Some("65534"), "{uid_line}");
    }
}

/// Run only by [`no_postgres_outlives_its_test_process`], in a child test
/// process: starts the cluster, prints its pid and directory, then ends as
/// `CTXHOST_PG_CHILD_END` says (`exit`, `panic`, or waiting to be killed).
#[test]
#[ignore = "a child process of no_postgres_outlives_its_test_process"]
fn pg_cluster_child() {
    let c = pg::cluster();
    println!("CLUSTER {} {}", c.pid, c.dir.display());
    match std::env::var("CTXHOST_PG_CHILD_END").as_deref() {
        Ok("panic") => panic!("the test failed on purpose"),
        Ok("kill") => std::thread::sleep(Duration::from_secs(120)),
        _ => {}
    }
}

/// However the test process ends — the tests pass, one panics, it is
/// killed with SIGKILL — its postmaster (and every backend) goes with it.
#[test]
fn no_postgres_outlives_its_test_process() {
    use std::io::{BufRead, BufReader};
    for end in ["exit", "panic", "kill"] {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", "store::pg_cluster_child", "--nocapture", "--test-threads", "1"])
            .env("CTXHOST_PG_CHILD_END", end)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = lines
            .find_map(|l| l.ok().and_then(|l| Some(l.split_once("CLUSTER ")?.1.to_owned())))
            .expect("the child started a cluster");
        let mut parts = line.split_whitespace();
        let pid: i32 = parts.next().unwrap().parse().unwrap();
        let dir = std::path::PathBuf::from(parts.next().unwrap());
        assert!(!util::is_dead(pid), "{end}: the postmaster runs");
        if end == "kill" {
            child.kill().unwrap();
        }
        let status = child.wait().unwrap();
        assert_eq!(status.success(), end == "exit", "{end}: {status}");
        util::within(15, &format!("{end}: the postmaster {pid} is gone"), || util::is_dead(pid));
        let backends = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|e| std::fs::read_link(e.path().join("cwd")).is_ok_and(|cwd| cwd.starts_with(&dir)))
            .count();
        assert_eq!(backends, 0, "{end}: no process of the cluster in {} is left", dir.display());
        if end != "kill" {
            assert!(!dir.exists(), "{end}: {} was removed at exit", dir.display());
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
