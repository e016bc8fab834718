//! One version of each plugin across the instances on one store: the rule
//! between a plugin's content hash here ([`super::content`]) and the one
//! recorded in the store ([`crate::host::store::PluginVersion`]).
//!
//! On a shared store (PostgreSQL, several homes): the recorded hash is the
//! fleet's version. The first instance to start with a plugin records its
//! hash; an instance whose files hash otherwise does not run that plugin
//! (its status is `error`, naming both hashes and what to do), so no call
//! of it is served by a version the others do not run. Only a deliberate
//! operator action changes the fleet's version: `ctxhost plugin install`,
//! `ctxhost plugin adopt` and `POST /api/plugins/{name}/reload` record this
//! home's files as it ([`Rule::Adopt`]); starts and the other reloads (the
//! change feed's, `--watch`, enable) only compare ([`Rule::Record`]),
//! reports only read ([`Rule::Look`]). An adopted version reaches the
//! running instances through the change feed (an `adopt` or `reload`
//! entry): each re-hashes its own files and refuses or resumes the plugin
//! (`app::follow`).
//!
//! On the embedded SQLite store (one home, one set of files) there is no
//! one to disagree with: the record follows every start, reload and install,
//! and nothing is refused.
//!
//! A plugin kept from running this way is *refused* ([`Refusal`]): the
//! calls it would take part in are answered with an error naming it and
//! both hashes (`server`, `sidecar`), rather than served without it.
//!
//! Never reads a plugin's files itself, never loads or runs anything.

use crate::host::LoadContext;
use crate::host::store::{PluginVersion, Store};

/// What a load does with the store's record of a plugin's version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Compare only; write nothing (`doctor`, `plugin list`, a glance).
    Look,
    /// Record this hash when none is recorded (or on a store of one home),
    /// else compare (a start, a reload).
    Record,
    /// Record this hash as the fleet's version, whatever was recorded (the
    /// operator's `plugin install` / `plugin adopt`).
    Adopt,
}

/// Why plugin `plugin` does not run on this instance: its files are not
/// the version the instances on the store run (or that cannot be told).
/// Its [`Display`](std::fmt::Display) is the plugin status's error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub plugin: String,
    /// The content hash of its files here (`None`: it cannot be computed).
    pub here: Option<String>,
    /// The manifest's version here.
    pub here_version: String,
    /// The fleet's version (`None`: the store could not be read).
    pub fleet: Option<Box<PluginVersion>>,
    /// Why, with the way out.
    pub reason: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

/// The `kind` of a call refused because a plugin taking part in it is
/// refused on this instance (the HTTP 503's body, the sidecar's error reply).
pub const REFUSED_KIND: &str = "plugin_version_mismatch";

impl Refusal {
    /// What every surface says about it: `kind`, the plugin, both hashes,
    /// the fleet's record, the reason and what to do.
    pub fn describe(&self) -> serde_json::Value {
        let fleet = self.fleet.as_ref();
        serde_json::json!({
            "kind": REFUSED_KIND,
            "plugin": self.plugin,
            "content_hash": self.here,
            "version": self.here_version,
            "fleet_hash": fleet.map(|f| f.hash.as_str()),
            "fleet_version": fleet.map(|f| f.version.as_str()),
            "recorded_by": fleet.map(|f| f.recorded_by.as_str()),
            "reason": self.reason,
            "fix": self.remedy(),
        })
    }

    /// The error text of a refused call of `hook`.
    pub fn refused_call(&self, hook: &str) -> String {
        format!("plugin '{}' takes part in `{hook}` and is refused on this instance: {}", self.plugin, self.reason)
    }

    /// A refusal whose versions could not be compared (`reason` says why).
    pub fn unknown(plugin: &str, here: Option<&str>, here_version: &str, reason: String) -> Refusal {
        Refusal {
            plugin: plugin.to_owned(),
            here: here.map(str::to_owned),
            here_version: here_version.to_owned(),
            fleet: None,
            reason,
        }
    }

    /// What an operator does about it.
    pub fn remedy(&self) -> String {
        let name = &self.plugin;
        format!(
            "make this instance's files of plugin '{name}' the same as the other instances' and reload it \
             (`POST /api/plugins/{name}/reload` here records these files as the version every instance runs; \
             `ctxhost plugin adopt {name}` does so without a daemon); calls resume once they agree"
        )
    }
}

/// Who records: `<host>:<home>`, so a person can find the instance.
pub fn recorder(cx: &LoadContext<'_>) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_owned()).unwrap_or_default();
    format!("{}:{}", if host.is_empty() { "localhost" } else { &host }, cx.home.root().display())
}

/// This instance's record of plugin `name`'s version, made now.
pub fn record(cx: &LoadContext<'_>, name: &str, hash: &str, version: &str) -> PluginVersion {
    PluginVersion {
        plugin: name.to_owned(),
        hash: hash.to_owned(),
        version: version.to_owned(),
        recorded_by: recorder(cx),
        recorded_at: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
    }
}

/// Applies `rule` to plugin `name` whose files hash to `hash` here (its
/// manifest says `version`). `Err`: why it must not run here.
pub fn check(cx: &LoadContext<'_>, name: &str, hash: &str, version: &str, rule: Rule) -> Result<(), Refusal> {
    if rule == Rule::Look && !crate::host::store::exists(cx.home) {
        // Nothing recorded, and a report does not make a store.
        return Ok(());
    }
    let store = crate::host::store::open(cx.home).map_err(|e| {
        let reason = format!("its version cannot be compared with the store's: {}", e.message());
        Refusal::unknown(name, Some(hash), version, reason)
    })?;
    check_on(&*store, cx, name, hash, version, rule)
}

/// [`check`] on an open store.
pub fn check_on(
    store: &dyn Store,
    cx: &LoadContext<'_>,
    name: &str,
    hash: &str,
    version: &str,
    rule: Rule,
) -> Result<(), Refusal> {
    decide(store, store.shared(), cx, name, hash, version, rule)
}

/// [`check_on`], with `shared` told (so the rule can be tested on either
/// kind of store with one backend).
fn decide(
    store: &dyn Store,
    shared: bool,
    cx: &LoadContext<'_>,
    name: &str,
    hash: &str,
    version: &str,
    rule: Rule,
) -> Result<(), Refusal> {
    let ours = || record(cx, name, hash, version);
    let failed = |e: crate::host::store::StoreError| {
        let reason = format!("its version cannot be recorded in the store: {}", e.message());
        Refusal::unknown(name, Some(hash), version, reason)
    };
    let fleet = match rule {
        Rule::Look if !shared => return Ok(()),
        Rule::Look => match store.plugin_version(name).map_err(failed)? {
            Some(fleet) => fleet,
            None => return Ok(()),
        },
        Rule::Record => {
            let recorded = store.record_plugin_version(&ours(), !shared).map_err(failed)?;
            if recorded.hash == hash {
                return Ok(());
            }
            recorded
        }
        Rule::Adopt => {
            store.record_plugin_version(&ours(), true).map_err(failed)?;
            return Ok(());
        }
    };
    if fleet.hash == hash {
        return Ok(());
    }
    Err(mismatch(name, hash, version, &fleet))
}

/// The refusal of an instance whose files of `name` are not the fleet's.
fn mismatch(name: &str, hash: &str, version: &str, fleet: &PluginVersion) -> Refusal {
    let reason = format!(
        "its files here ({hash}, version {version}) differ from the version the instances on this store run \
         ({fleet_hash}, version {fleet_version}, recorded by {by}); it does not run here rather than mix versions. \
         Make its files the same as the other instances', or make these the version every instance runs: \
         `POST /api/plugins/{name}/reload` on this instance, or `ctxhost plugin adopt {name}`",
        fleet_hash = fleet.hash,
        fleet_version = fleet.version,
        by = fleet.recorded_by,
    );
    Refusal {
        plugin: name.to_owned(),
        here: Some(hash.to_owned()),
        here_version: version.to_owned(),
        fleet: Some(Box::new(fleet.clone())),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::store::sqlite::SqliteStore;

    fn with_cx(f: impl FnOnce(&LoadContext<'_>, &SqliteStore, &std::path::Path)) {
        let dir = tempfile::tempdir().unwrap();
        let home = crate::home::Home::at(dir.path());
        let config = crate::config::HostConfig::default();
        let cx = LoadContext { home: &home, config: &config, host_env: &LoadContext::process_env };
        let store = SqliteStore::open(&dir.path().join("state.db")).unwrap();
        f(&cx, &store, dir.path());
    }

    #[test]
    fn one_home_follows_its_files_and_never_refuses() {
        with_cx(|cx, s, dir| {
            check_on(s, cx, "p", "sha256:aa", "1", Rule::Record).unwrap();
            check_on(s, cx, "p", "sha256:bb", "2", Rule::Look).unwrap();
            check_on(s, cx, "p", "sha256:bb", "2", Rule::Record).unwrap();
            let now = s.plugin_version("p").unwrap().unwrap();
            assert_eq!((now.hash.as_str(), now.version.as_str()), ("sha256:bb", "2"), "the record follows");
            assert!(now.recorded_by.ends_with(&format!(":{}", dir.display())), "{}", now.recorded_by);
        });
    }

    #[test]
    fn a_shared_store_keeps_the_first_version_until_adopted() {
        with_cx(|cx, s, _| {
            let shared = |hash: &str, version: &str, rule| decide(s, true, cx, "p", hash, version, rule);
            shared("sha256:aa", "1", Rule::Look).unwrap();
            assert_eq!(s.plugin_version("p").unwrap(), None, "a report records nothing");
            shared("sha256:aa", "1", Rule::Record).unwrap();
            let e = shared("sha256:bb", "1", Rule::Record).unwrap_err();
            assert_eq!(
                (e.here.as_deref(), e.fleet.as_ref().map(|f| f.hash.as_str())),
                (Some("sha256:bb"), Some("sha256:aa"))
            );
            let e = e.to_string();
            assert!(e.contains("sha256:bb") && e.contains("sha256:aa") && e.contains("ctxhost plugin adopt p"), "{e}");
            assert_eq!(shared("sha256:bb", "1", Rule::Look).unwrap_err().to_string(), e);
            assert_eq!(s.plugin_version("p").unwrap().unwrap().hash, "sha256:aa", "a start does not move it");
            shared("sha256:bb", "2", Rule::Adopt).unwrap();
            shared("sha256:bb", "2", Rule::Record).unwrap();
            assert!(shared("sha256:aa", "1", Rule::Record).is_err(), "now the old files differ");
        });
    }
}
