//! The [`Store`] contract as tests: one body per part of the trait, run on
//! every backend (`sqlite.rs` and `postgres/` call them on a fresh store),
//! so both keep the same semantics.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::json;

use super::quota::{StorageLimits, VfsLimits};
use super::{Actor, DueStep, Node, Scope, Store, StoreErrorKind, TriggerRecord, Usage};

pub fn file(content: &str, owner: &str) -> Node {
    Node::File { content: content.into(), owner: owner.into() }
}

pub fn trigger(id: &str, owner: Option<&str>, wake: Option<u64>) -> TriggerRecord {
    let mut t = json!({"id": id, "type": "event", "event_name": "x"}).as_object().cloned().unwrap();
    if let Some(o) = owner {
        t.insert("plugin".into(), json!(o));
    }
    TriggerRecord { id: id.into(), trigger: t, created: 10, fired: None, wake }
}

/// vfs nodes put get list delete and usage.
pub fn vfs_nodes(s: &dyn Store) {
    s.vfs_put("/plugins/a/x.md", &file("hello", "a"), None).unwrap();
    s.vfs_put("/plugins/a/d/y", &file("yy", "a"), None).unwrap();
    s.vfs_put("/plugins/a.md", &file("about", "a"), None).unwrap();
    s.vfs_put("/plugins/a/live", &Node::Symbolic { owner: "a".into(), searchable: true }, None).unwrap();
    s.vfs_put("/plugins/ab/z", &file("z", "ab"), None).unwrap();
    assert_eq!(s.vfs_get("/plugins/a/x.md").unwrap(), Some(file("hello", "a")));
    assert_eq!(s.vfs_get("/plugins/a/live").unwrap(), Some(Node::Symbolic { owner: "a".into(), searchable: true }));
    assert_eq!(s.vfs_get("/plugins/a/nope").unwrap(), None);
    assert_eq!(s.vfs_list("/plugins/a").unwrap(), ["d", "live", "x.md"]);
    assert_eq!(s.vfs_list("/plugins").unwrap(), ["a", "a.md", "ab"], "sorted, once each");
    assert_eq!(s.vfs_list("/").unwrap(), ["plugins"]);
    assert_eq!(s.vfs_usage("a").unwrap(), Usage { entries: 4, bytes: 12 });

    s.vfs_put("/plugins/a/x.md", &file("hi", "a"), None).unwrap();
    assert_eq!(s.vfs_usage("a").unwrap(), Usage { entries: 4, bytes: 9 }, "a replace counts once");
    assert!(s.vfs_delete("/plugins/a").unwrap());
    assert!(!s.vfs_delete("/plugins/a").unwrap(), "already gone");
    assert_eq!(s.vfs_list("/plugins").unwrap(), ["a.md", "ab"], "the subtree went, not its neighbours");
    assert_eq!(s.vfs_usage("a").unwrap(), Usage { entries: 1, bytes: 5 });
}

/// vfs quota is checked in the write.
pub fn vfs_quota(s: &dyn Store) {
    let limits = VfsLimits { file_bytes: 10, plugin_bytes: 15, plugin_nodes: 3 };
    let err = s.vfs_put("/p/a/big", &file(&"x".repeat(11), "a"), Some(&limits)).unwrap_err();
    assert!(matches!(&err.kind, StoreErrorKind::Quota(m) if m.contains("at most 10 bytes")), "{err}");
    assert!(err.is_refusal());
    s.vfs_put("/p/a/1", &file(&"x".repeat(10), "a"), Some(&limits)).unwrap();
    let err = s.vfs_put("/p/a/2", &file(&"x".repeat(6), "a"), Some(&limits)).unwrap_err();
    assert_eq!(
        err.message(),
        "plugin 'a' would keep 2 vfs nodes and 16 bytes; the most it may keep is 3 nodes and 15 bytes"
    );
    s.vfs_put("/p/a/1", &file(&"x".repeat(10), "a"), Some(&limits)).unwrap();
    s.vfs_put("/p/a/2", &file("xxxxx", "a"), Some(&limits)).unwrap();
    s.vfs_put("/p/a/3", &Node::Symbolic { owner: "a".into(), searchable: false }, Some(&limits)).unwrap();
    let err = s.vfs_put("/p/a/4", &file("", "a"), Some(&limits)).unwrap_err();
    assert!(err.message().contains("would keep 4 vfs nodes"), "{err}");
    s.vfs_put("/p/b/4", &file("other", "b"), Some(&limits)).unwrap();
    s.vfs_put("/p/a/4", &file("host writes", "host"), None).unwrap();
    assert_eq!(s.vfs_get("/p/a/2").unwrap(), Some(file("xxxxx", "a")), "a refusal changed nothing");
}

/// triggers owners quota update and due.
pub fn triggers(s: &dyn Store) {
    let plugin = |name| Actor::Plugin { name, max_triggers: 2 };
    s.trigger_put(&trigger("a1", Some("a"), None), plugin("a")).unwrap();
    s.trigger_put(&trigger("a1", Some("a"), Some(5)), plugin("a")).unwrap();
    s.trigger_put(&trigger("a2", Some("a"), Some(20)), plugin("a")).unwrap();
    let err = s.trigger_put(&trigger("a3", Some("a"), None), plugin("a")).unwrap_err();
    assert_eq!(err.message(), "plugin 'a' has 2 triggers already, the most it may keep");
    let err = s.trigger_put(&trigger("a1", Some("b"), None), plugin("b")).unwrap_err();
    assert!(matches!(&err.kind, StoreErrorKind::NotYours { owner: Some(o), .. } if o == "a"), "{err}");
    s.trigger_put(&trigger("h", None, Some(7)), Actor::Host).unwrap();
    assert!(s.trigger_delete("h", plugin("a")).unwrap_err().message().contains("belongs to the embedder"));
    assert_eq!(s.trigger_list().unwrap().iter().map(|t| t.id.as_str()).collect::<Vec<_>>(), ["a1", "a2", "h"]);
    assert_eq!(s.trigger_get("a1").unwrap().unwrap().wake, Some(5));

    let updated = s
        .trigger_update("a2", plugin("a"), &mut |old| {
            let mut new = old.clone();
            new.trigger.insert("priority".into(), json!(3));
            new.id = "renamed".into();
            Ok(new)
        })
        .unwrap()
        .unwrap();
    assert_eq!((updated.id.as_str(), &updated.trigger["priority"]), ("a2", &json!(3)), "the id stays");
    let err = s.trigger_update("a2", plugin("a"), &mut |_| Err("no good".into())).unwrap_err();
    assert!(matches!(&err.kind, StoreErrorKind::Rejected(m) if m == "no good"));
    assert_eq!(s.trigger_get("a2").unwrap().unwrap().trigger["priority"], 3, "a rejected change changed nothing");
    assert!(s.trigger_update("none", Actor::Host, &mut |r| Ok(r.clone())).unwrap().is_none());
    assert!(s.trigger_update("a2", plugin("b"), &mut |r| Ok(r.clone())).is_err());

    // Only rows whose wake time came are claimed; each step applied.
    assert!(s.triggers_take_due(4, &mut |_| panic!("nothing is due at 4")).unwrap().is_empty());
    let mut seen = Vec::new();
    let taken = s
        .triggers_take_due(10, &mut |r| {
            seen.push(r.id.clone());
            match r.id.as_str() {
                "a1" => DueStep::Fire { fired: 10, wake: Some(15) },
                _ => DueStep::Expire,
            }
        })
        .unwrap();
    assert_eq!(seen, ["a1", "h"]);
    assert_eq!(taken.len(), 2);
    let a1 = s.trigger_get("a1").unwrap().unwrap();
    assert_eq!((a1.fired, a1.wake), (Some(10), Some(15)));
    assert!(s.trigger_get("h").unwrap().is_none(), "expired");
    let taken = s
        .triggers_take_due(20, &mut |r| if r.id == "a1" { DueStep::FireOnce } else { DueStep::Wait { wake: None } })
        .unwrap();
    assert_eq!(taken.len(), 2);
    assert!(s.trigger_get("a1").unwrap().is_none());
    assert_eq!(s.trigger_get("a2").unwrap().unwrap().wake, None, "waits for an event now");
    assert!(s.triggers_take_due(u64::MAX, &mut |_| panic!("nothing wakes")).unwrap().is_empty());
    assert!(s.trigger_delete("a2", plugin("a")).unwrap());
    assert!(!s.trigger_delete("a2", plugin("a")).unwrap());
}

/// storage scopes quota and usage.
pub fn storage(s: &dyn Store) {
    let limits = StorageLimits { value_bytes: 8, keys: 2, plugin_bytes: 10 };
    s.storage_put("p", Scope::Global, "k", &json!(1), Some(&limits)).unwrap();
    s.storage_put("p", Scope::Session("a1"), "k", &json!("ab"), Some(&limits)).unwrap();
    assert_eq!(s.storage_get("p", Scope::Global, "k").unwrap(), Some(json!(1)));
    assert_eq!(s.storage_get("p", Scope::Session("a1"), "k").unwrap(), Some(json!("ab")));
    assert_eq!(s.storage_get("p", Scope::Session("a2"), "k").unwrap(), None);
    assert_eq!(s.storage_get("q", Scope::Global, "k").unwrap(), None);
    assert_eq!(s.storage_usage("p").unwrap(), Usage { entries: 2, bytes: 5 });
    let err = s.storage_put("p", Scope::Global, "k2", &json!(2), Some(&limits)).unwrap_err();
    assert!(err.message().contains("2 storage keys already"), "{err}");
    let err = s.storage_put("p", Scope::Global, "k", &json!("123456789"), Some(&limits)).unwrap_err();
    assert!(err.message().contains("a value may hold at most 8 bytes"), "{err}");
    let err = s.storage_put("p", Scope::Global, "k", &json!("12345678"[..6]), Some(&limits)).unwrap_err();
    assert!(err.message().contains("would keep 12 bytes"), "{err}");
    s.storage_put("p", Scope::Global, "k", &json!("123"), Some(&limits)).unwrap();
    assert_eq!(s.storage_usage("p").unwrap(), Usage { entries: 2, bytes: 9 });
    assert!(s.storage_delete("p", Scope::Session("a1"), "k").unwrap());
    assert!(!s.storage_delete("p", Scope::Session("a1"), "k").unwrap());
    assert_eq!(s.storage_get("p", Scope::Global, "k").unwrap(), Some(json!("123")));
}

/// config values and plugin choices.
pub fn config_and_choices(s: &dyn Store) {
    assert!(s.config_values("p").unwrap().is_empty());
    let values = BTreeMap::from([("A".to_owned(), json!(1)), ("B".to_owned(), json!({"x": [1, 2]}))]);
    s.config_put("p", &values).unwrap();
    s.config_put("p", &BTreeMap::from([("A".to_owned(), json!(2))])).unwrap();
    let got = s.config_values("p").unwrap();
    assert_eq!((&got["A"], &got["B"]), (&json!(2), &json!({"x": [1, 2]})));
    assert!(s.config_values("q").unwrap().is_empty());

    assert_eq!(s.plugin_choice("p").unwrap(), None);
    assert!(s.set_plugin_choice("p", false).unwrap());
    assert!(!s.set_plugin_choice("p", false).unwrap());
    assert!(s.set_plugin_choice("q", true).unwrap());
    assert_eq!(s.plugin_choice("p").unwrap(), Some(false));
    assert_eq!(s.plugin_choices().unwrap(), BTreeMap::from([("p".to_owned(), false), ("q".to_owned(), true)]));
}

/// Eight writers on two stores of one database (two processes, two
/// instances) keep every change, and the quota they all fill holds.
pub fn concurrent_writers(s: Arc<dyn Store>, other: Arc<dyn Store>) {
    let limits = VfsLimits { file_bytes: 100, plugin_bytes: 1_000_000, plugin_nodes: 50 };
    std::thread::scope(|scope| {
        for w in 0..8 {
            let store = if w % 2 == 0 { s.clone() } else { other.clone() };
            scope.spawn(move || {
                for i in 0..25 {
                    // Everyone fills the same plugin's quota.
                    let _ = store.vfs_put(&format!("/p/shared/{w}-{i}"), &file("x", "shared"), Some(&limits));
                    store.vfs_put(&format!("/p/w{w}/{i}"), &file("y", &format!("w{w}")), Some(&limits)).unwrap();
                    let t = trigger(&format!("t{w}-{i}"), Some(&format!("w{w}")), None);
                    store.trigger_put(&t, Actor::Plugin { name: &format!("w{w}"), max_triggers: 1000 }).unwrap();
                    store.storage_put("p", Scope::Global, &format!("{w}-{i}"), &json!(i), None).unwrap();
                }
            });
        }
    });
    assert_eq!(s.vfs_usage("shared").unwrap().entries, 50, "the quota held against racing writers");
    for w in 0..8 {
        assert_eq!(s.vfs_usage(&format!("w{w}")).unwrap().entries, 25);
    }
    assert_eq!(s.trigger_list().unwrap().len(), 200);
    assert_eq!(other.storage_usage("p").unwrap().entries, 200);
}

/// Grants: the first record stays, a set replaces and says what it
/// replaced, `None` forgets; the JSON comes back as written.
pub fn grants(s: &dyn Store) {
    assert_eq!(s.grant_get("p").unwrap(), None);
    let first = json!({"allow_network": false, "readable_paths": ["/b", "/a"], "allow_filesystem": false});
    assert_eq!(s.grant_first("p", &first).unwrap(), first);
    let wider = json!({"allow_network": true, "env": ["KEY"]});
    assert_eq!(s.grant_first("p", &wider).unwrap(), first, "a grant recorded first stays");
    assert_eq!(s.grant_get("p").unwrap().unwrap().to_string(), first.to_string(), "key order kept");
    assert_eq!(s.grant_set("p", Some(&wider)).unwrap(), Some(first));
    assert_eq!(s.grant_set("p", Some(&wider)).unwrap(), Some(wider.clone()), "unchanged");
    assert_eq!(s.grant_get("p").unwrap(), Some(wider.clone()));
    assert_eq!(s.grant_get("q").unwrap(), None, "one plugin's grant is its own");
    assert_eq!(s.grant_set("p", None).unwrap(), Some(wider));
    assert_eq!(s.grant_get("p").unwrap(), None);
    assert_eq!(s.grant_set("p", None).unwrap(), None);
}

/// Trigger claims settle only while held; named leases go to one holder
/// until they run out.
pub fn claims_and_leases(s: &dyn Store) {
    s.trigger_put(&trigger("c1", None, Some(10)), Actor::Host).unwrap();
    let claimed = s.triggers_take_due(10, &mut |_| DueStep::Claim { until: 40 }).unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(s.trigger_get("c1").unwrap().unwrap().wake, Some(40), "claimed until 40");
    assert!(s.triggers_take_due(39, &mut |_| panic!("claimed: not due")).unwrap().is_empty());
    assert!(!s.trigger_settle("c1", 39, DueStep::FireOnce).unwrap(), "another claim's token");
    assert!(s.trigger_settle("c1", 40, DueStep::Claim { until: 50 }).unwrap(), "renewed");
    assert!(s.trigger_settle("c1", 50, DueStep::Fire { fired: 12, wake: Some(60) }).unwrap());
    let r = s.trigger_get("c1").unwrap().unwrap();
    assert_eq!((r.fired, r.wake), (Some(12), Some(60)));
    assert!(!s.trigger_settle("c1", 50, DueStep::FireOnce).unwrap(), "settled once");
    assert!(s.trigger_settle("c1", 60, DueStep::FireOnce).unwrap());
    assert!(s.trigger_get("c1").unwrap().is_none());

    let long = std::time::Duration::from_secs(60);
    assert!(s.lease_take("schedule:p/a", "one", long).unwrap());
    assert!(s.lease_take("schedule:p/a", "one", long).unwrap(), "the holder renews");
    assert!(!s.lease_take("schedule:p/a", "two", long).unwrap(), "held by another");
    assert!(s.lease_take("schedule:p/b", "two", long).unwrap(), "another name");
    assert!(!s.lease_drop("schedule:p/a", "two").unwrap());
    assert!(s.lease_drop("schedule:p/a", "one").unwrap());
    assert!(s.lease_take("schedule:p/a", "two", std::time::Duration::from_millis(200)).unwrap(), "free again");
    assert!(!s.lease_take("schedule:p/a", "one", long).unwrap());
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(s.lease_take("schedule:p/a", "one", long).unwrap(), "ran out: taken over");
    assert!(!s.lease_take("schedule:p/a", "two", long).unwrap());
}

fn version(plugin: &str, hash: &str, by: &str) -> super::PluginVersion {
    super::PluginVersion {
        plugin: plugin.into(),
        hash: hash.into(),
        version: "1.0.0".into(),
        recorded_by: by.into(),
        recorded_at: 1_700_000_000,
    }
}

/// Plugin versions: the first record stays unless replaced; each plugin its own.
pub fn plugin_versions(s: &dyn Store) {
    assert_eq!(s.plugin_version("p").unwrap(), None);
    let first = version("p", "sha256:aa", "host-a:/a");
    assert_eq!(s.record_plugin_version(&first, false).unwrap(), first);
    // A second instance with other files finds the first's record in force.
    assert_eq!(s.record_plugin_version(&version("p", "sha256:bb", "host-b:/b"), false).unwrap(), first);
    assert_eq!(s.plugin_version("p").unwrap(), Some(first.clone()));
    // The operator's record replaces it.
    let adopted = version("p", "sha256:bb", "host-b:/b");
    assert_eq!(s.record_plugin_version(&adopted, true).unwrap(), adopted);
    assert_eq!(s.plugin_version("p").unwrap(), Some(adopted));
    assert_eq!(s.plugin_version("q").unwrap(), None, "one plugin's record is its own");
}

/// Two stores on one database recording the same plugin at once: both end
/// up naming the same record.
pub fn plugin_versions_race(s: Arc<dyn Store>, other: Arc<dyn Store>) {
    let threads: Vec<_> = [(s, "sha256:aa"), (other, "sha256:bb")]
        .into_iter()
        .map(|(store, hash)| {
            std::thread::spawn(move || {
                (0..20)
                    .map(|i| store.record_plugin_version(&version(&format!("p{i}"), hash, hash), false).unwrap())
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let results: Vec<Vec<super::PluginVersion>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(results[0], results[1], "each plugin has one version in force, whoever got there first");
}
