//! Grants (spec section 6): the privileges the operator let each plugin have,
//! recorded in `<home>/grants.toml` and never read from the plugin's own files.
//! A home whose state is in a PostgreSQL store (`[store] url`) records them
//! in the store instead (`plugin_grants`, one JSON object per plugin; the
//! file is imported once by `host::store::migrate`), so every instance on it
//! runs a plugin with the same grant, and a grant recorded through one is
//! announced to the others (the store's change feed). A SQLite home keeps
//! the file: it is the operator's record to read and review, the docs and
//! the sandbox's protections name it, and one instance shares it with no one.
//!
//! A grant holds `allow_network`, `allow_filesystem`, `readable_paths` and
//! `writable_paths`, `env` — the host variables a `${VAR}` of the plugin's
//! `[env]` may read (beyond config.toml's `allowed_env_vars`), given only by
//! `ctxhost plugin grant <name> --env VAR` — and `source_builds`: whether pip
//! may build the plugin's dependencies from source distributions (running
//! their build code, confined; only `ctxhost plugin grant <name>
//! --source-builds` sets it). A manifest never asks for these two into its
//! grant. It is recorded the first time a plugin loads, by
//! `ctxhost plugin install` and by `ctxhost plugin grant`. A manifest that
//! later asks for more (a hook rewriting its own plugin.toml) gets no more:
//! [`enforce`] narrows the loaded settings to the grant and warns.
//!
//! The rule callers rely on: after loading, those four fields of
//! [`ExecSettings`] are the **effective** privileges — what the manifest asks
//! for, within the grant. The environment plan reads them today; the sandbox
//! must read them and nothing else.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::filestore::{self as store, StoreError};
use crate::home::Home;
use crate::manifest::ExecSettings;

const HEADER: &str = "# Privileges granted to each plugin (spec section 6), written by ctxhost.\n\
# A plugin runs with at most these, whatever its plugin.toml asks for.\n\
# `ctxhost plugin grant <name>` records what a plugin's manifest asks for now.\n\n";

/// The privileges of one plugin.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    #[serde(default)]
    pub allow_network: bool,
    #[serde(default)]
    pub allow_filesystem: bool,
    #[serde(default)]
    pub readable_paths: Vec<PathBuf>,
    #[serde(default)]
    pub writable_paths: Vec<PathBuf>,
    /// Host variables `${VAR}` in the plugin's `[env]` may read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// pip may build this plugin's dependencies from source distributions
    /// (default: wheels only). Never asked for by a manifest.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub source_builds: bool,
}

/// The whole `grants.toml`.
#[derive(Debug, Default, Serialize, Deserialize)]
struct GrantsFile {
    #[serde(default)]
    plugins: BTreeMap<String, Grant>,
}

impl Grant {
    /// What `settings` (as read from a manifest) ask for.
    pub fn requested(settings: &ExecSettings) -> Grant {
        Grant {
            allow_network: settings.allow_network,
            allow_filesystem: settings.allow_filesystem,
            readable_paths: settings.readable_paths.clone(),
            writable_paths: settings.writable_paths.clone(),
            env: Vec::new(),
            source_builds: false,
        }
    }

    /// The keys where `requested` asks for more than `self` grants.
    pub fn exceeded_by(&self, requested: &Grant) -> Vec<&'static str> {
        let mut keys = Vec::new();
        if requested.allow_network && !self.allow_network {
            keys.push("allow_network");
        }
        if requested.allow_filesystem && !self.allow_filesystem {
            keys.push("allow_filesystem");
        }
        if requested.readable_paths.iter().any(|p| !self.readable_paths.contains(p)) {
            keys.push("readable_paths");
        }
        if requested.writable_paths.iter().any(|p| !self.writable_paths.contains(p)) {
            keys.push("writable_paths");
        }
        keys
    }

    /// Narrows `settings` to what they ask for within this grant.
    pub fn narrow(&self, settings: &mut ExecSettings) {
        settings.allow_network &= self.allow_network;
        settings.allow_filesystem &= self.allow_filesystem;
        settings.readable_paths.retain(|p| self.readable_paths.contains(p));
        settings.writable_paths.retain(|p| self.writable_paths.contains(p));
    }

    /// One line per key that differs from `before`, as `key: old -> new`.
    pub fn changes_from(&self, before: &Grant) -> Vec<String> {
        let mut lines = Vec::new();
        let mut flag = |key: &str, old: bool, new: bool| {
            if old != new {
                lines.push(format!("{key}: {old} -> {new}"));
            }
        };
        flag("allow_network", before.allow_network, self.allow_network);
        flag("allow_filesystem", before.allow_filesystem, self.allow_filesystem);
        flag("source_builds", before.source_builds, self.source_builds);
        for (key, old, new) in [
            ("readable_paths", &before.readable_paths, &self.readable_paths),
            ("writable_paths", &before.writable_paths, &self.writable_paths),
        ] {
            if old != new {
                lines.push(format!("{key}: {} -> {}", show_paths(old), show_paths(new)));
            }
        }
        if before.env != self.env {
            lines.push(format!("env: [{}] -> [{}]", before.env.join(", "), self.env.join(", ")));
        }
        lines
    }

    /// A one-line summary: `network denied, filesystem confined, reads /a, writes /b`.
    pub fn summary(&self) -> String {
        let mut parts = vec![
            if self.allow_network { "network allowed" } else { "network denied" }.to_owned(),
            if self.allow_filesystem { "filesystem allowed" } else { "filesystem confined" }.to_owned(),
        ];
        if !self.readable_paths.is_empty() {
            parts.push(format!("reads {}", show_paths(&self.readable_paths)));
        }
        if !self.writable_paths.is_empty() {
            parts.push(format!("writes {}", show_paths(&self.writable_paths)));
        }
        if !self.env.is_empty() {
            parts.push(format!("env {}", self.env.join(", ")));
        }
        if self.source_builds {
            parts.push("source builds allowed".to_owned());
        }
        parts.join(", ")
    }
}

fn show_paths(paths: &[PathBuf]) -> String {
    let quoted: Vec<String> = paths.iter().map(|p| format!("{:?}", p.display().to_string())).collect();
    format!("[{}]", quoted.join(", "))
}

/// Where a home's grants are recorded.
enum Records {
    /// `grants.toml`.
    File(PathBuf),
    /// The shared store, named by its URL (redacted).
    Store { store: Arc<dyn crate::host::store::Store>, location: String },
}

/// Where `home`'s grants are: the store when it names a store URL, else
/// `grants.toml`. Blocks (opens the store at the first call).
fn records(home: &Home) -> Result<Records, StoreError> {
    let failed = |what: String, e: crate::host::store::StoreError| StoreError {
        path: PathBuf::from(what),
        action: "failed to open",
        reason: e.to_string(),
    };
    match crate::host::store::store_url(home) {
        Ok(None) => Ok(Records::File(home.grants_file())),
        Ok(Some(url)) => {
            let location = crate::config::redact_url(&url);
            let store = crate::host::store::open(home).map_err(|e| failed(location.clone(), e))?;
            Ok(Records::Store { store, location })
        }
        Err(e) => Err(failed(home.config_file().display().to_string(), e)),
    }
}

/// Where `home`'s grants are recorded, for messages: `` `<home>/grants.toml` ``
/// or `` the store `postgres://…` ``.
pub fn location(home: &Home) -> String {
    match crate::host::store::store_url(home) {
        Ok(Some(url)) => format!("the store `{}`", crate::config::redact_url(&url)),
        _ => format!("`{}`", home.grants_file().display()),
    }
}

impl Records {
    fn failed(&self, action: &'static str) -> impl Fn(crate::host::store::StoreError) -> StoreError + '_ {
        move |e| StoreError {
            path: match self {
                Records::File(path) => path.clone(),
                Records::Store { location, .. } => PathBuf::from(location),
            },
            action,
            reason: e.to_string(),
        }
    }

    fn decode(&self, name: &str, value: serde_json::Value) -> Result<Grant, StoreError> {
        serde_json::from_value(value).map_err(|e| {
            (self.failed("failed to read"))(crate::host::store::StoreError::new(
                "host",
                "grant_get",
                crate::host::store::StoreErrorKind::Corrupt {
                    what: format!("the grant of plugin '{name}'"),
                    reason: e.to_string(),
                },
            ))
        })
    }

    fn encode(&self, grant: &Grant) -> Result<serde_json::Value, StoreError> {
        serde_json::to_value(grant).map_err(|e| StoreError {
            path: PathBuf::new(),
            action: "failed to write",
            reason: format!("a grant does not serialise: {e}"),
        })
    }
}

/// The recorded grant of `name`, if any.
///
/// # Errors
/// `grants.toml` exists but cannot be read, or the store failed.
pub fn get(home: &Home, name: &str) -> Result<Option<Grant>, StoreError> {
    get_in(&records(home)?, name)
}

/// The recorded grants of `names` (those that have one), read at once: one
/// read of `grants.toml`, or one store lookup each.
///
/// # Errors
/// `grants.toml` exists but cannot be read, or the store failed.
pub fn get_many(home: &Home, names: &[&str]) -> Result<BTreeMap<String, Grant>, StoreError> {
    let records = records(home)?;
    match &records {
        Records::File(path) => {
            let mut file = store::read::<GrantsFile>(path)?;
            Ok(names.iter().filter_map(|n| file.plugins.remove(*n).map(|g| ((*n).to_owned(), g))).collect())
        }
        Records::Store { .. } => {
            let mut out = BTreeMap::new();
            for name in names {
                if let Some(g) = get_in(&records, name)? {
                    out.insert((*name).to_owned(), g);
                }
            }
            Ok(out)
        }
    }
}

fn get_in(records: &Records, name: &str) -> Result<Option<Grant>, StoreError> {
    match records {
        Records::File(path) => Ok(store::read::<GrantsFile>(path)?.plugins.remove(name)),
        r @ Records::Store { store, .. } => {
            let value = store.grant_get(name).map_err(r.failed("failed to read"))?;
            value.map(|v| r.decode(name, v)).transpose()
        }
    }
}

/// Records `grant` for `name`, replacing any earlier one; returns the earlier one.
///
/// # Errors
/// `grants.toml` cannot be read, locked or written, or the store failed.
pub fn set(home: &Home, name: &str, grant: Grant) -> Result<Option<Grant>, StoreError> {
    match &records(home)? {
        Records::File(path) => store::update(path, HEADER, |file: &mut GrantsFile| {
            let before = file.plugins.insert(name.to_owned(), grant.clone());
            (before.as_ref() != Some(&grant), before)
        }),
        r @ Records::Store { store, .. } => {
            let value = r.encode(&grant)?;
            let before = store.grant_set(name, Some(&value)).map_err(r.failed("failed to write"))?;
            before.map(|v| r.decode(name, v)).transpose()
        }
    }
}

/// Forgets the grant of `name`; returns whether there was one.
///
/// # Errors
/// `grants.toml` cannot be read, locked or written, or the store failed.
pub fn remove(home: &Home, name: &str) -> Result<bool, StoreError> {
    match &records(home)? {
        Records::File(path) => store::update(path, HEADER, |file: &mut GrantsFile| {
            let had = file.plugins.remove(name).is_some();
            (had, had)
        }),
        r @ Records::Store { store, .. } => {
            Ok(store.grant_set(name, None).map_err(r.failed("failed to write"))?.is_some())
        }
    }
}

/// Records `grant` for `name` unless a grant is already recorded (another
/// process may have recorded one since the caller looked); returns the grant
/// in force.
fn record_first(records: &Records, name: &str, grant: &Grant) -> Result<Grant, StoreError> {
    match records {
        Records::File(path) => store::update(path, HEADER, |file: &mut GrantsFile| match file.plugins.get(name) {
            Some(existing) => (false, existing.clone()),
            None => {
                file.plugins.insert(name.to_owned(), grant.clone());
                (true, grant.clone())
            }
        }),
        Records::Store { store, .. } => {
            let value = records.encode(grant)?;
            let in_force = store.grant_first(name, &value).map_err(records.failed("failed to write"))?;
            records.decode(name, in_force)
        }
    }
}

/// Whether `${var}` in plugin `name`'s `[env]` may read the host's `var`:
/// config.toml's `allowed_env_vars` (every plugin) or the plugin's recorded
/// grant (`ctxhost plugin grant <name> --env VAR`). Read from `grants.toml`
/// (or the store) at every load, the record [`enforce`] reads, never from
/// the plugin's own files. Failing closed: an unreadable record allows
/// nothing beyond `allowed_env_vars`.
pub fn env_allowed(home: &Home, allowed_env_vars: &[String], name: &str, var: &str) -> bool {
    allowed_env_vars.iter().any(|v| v == var)
        || get(home, name).ok().flatten().is_some_and(|g| g.env.iter().any(|v| v == var))
}

/// Makes `settings` (just read from plugin `name`'s manifest) effective: the
/// first load records what they ask for; a later load narrows them to the
/// recorded grant. Returns the warnings to show.
///
/// Failing closed: when `grants.toml` (or the store) exists but cannot be
/// read, the plugin gets no privileges at all (and a warning naming it).
/// When the first record cannot be written, the plugin runs with what it
/// asks for, as it would have been recorded, and a warning says so.
pub fn enforce(home: &Home, name: &str, settings: &mut ExecSettings) -> Vec<String> {
    let requested = Grant::requested(settings);
    let recorded = match records(home).and_then(|r| get_in(&r, name).map(|g| (r, g))) {
        Ok((_, Some(grant))) => grant,
        Ok((records, None)) => match record_first(&records, name, &requested) {
            Ok(grant) => grant,
            Err(e) => return vec![format!("could not record the grant of plugin '{name}': {e}")],
        },
        Err(e) => {
            Grant::default().narrow(settings);
            return vec![format!("{e}; plugin '{name}' runs with no privileges (network denied, filesystem confined)")];
        }
    };
    let exceeded = recorded.exceeded_by(&requested);
    recorded.narrow(settings);
    if exceeded.is_empty() {
        return Vec::new();
    }
    vec![format!(
        "plugin '{name}' asks for more than it was granted ({}); it runs with the grant recorded in {}. \
         If the change is yours, record it with `ctxhost plugin grant {name}`",
        exceeded.join(", "),
        location(home)
    )]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(network: bool, readable: &[&str]) -> ExecSettings {
        ExecSettings {
            allow_network: network,
            readable_paths: readable.iter().map(PathBuf::from).collect(),
            ..ExecSettings::default()
        }
    }

    #[test]
    fn first_load_records_later_loads_are_narrowed() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path());
        let mut first = settings(false, &["/a"]);
        assert!(enforce(&home, "p", &mut first).is_empty());
        assert_eq!(get(&home, "p").unwrap(), Some(Grant::requested(&first)));

        let mut wider = settings(true, &["/a", "/b"]);
        let warnings = enforce(&home, "p", &mut wider);
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("(allow_network, readable_paths)"), "{warnings:?}");
        assert!(warnings[0].ends_with("`ctxhost plugin grant p`"), "{warnings:?}");
        assert!(!wider.allow_network);
        assert_eq!(wider.readable_paths, [PathBuf::from("/a")]);

        // Asking for less is kept as asked.
        let mut narrower = settings(false, &[]);
        assert!(enforce(&home, "p", &mut narrower).is_empty());
        assert!(narrower.readable_paths.is_empty());

        let before = set(&home, "p", Grant::requested(&settings(true, &["/a", "/b"]))).unwrap().unwrap();
        let mut again = settings(true, &["/a", "/b"]);
        assert!(enforce(&home, "p", &mut again).is_empty());
        assert!(again.allow_network);
        let now = get(&home, "p").unwrap().unwrap();
        assert_eq!(
            now.changes_from(&before),
            ["allow_network: false -> true", r#"readable_paths: ["/a"] -> ["/a", "/b"]"#]
        );
    }

    #[test]
    fn an_unreadable_grants_file_denies_everything() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path());
        std::fs::write(home.grants_file(), "plugins = 3 [").unwrap();
        let mut s = settings(true, &["/a"]);
        let warnings = enforce(&home, "p", &mut s);
        assert!(warnings[0].contains("runs with no privileges"), "{warnings:?}");
        assert!(!s.allow_network && s.readable_paths.is_empty());
        assert_eq!(std::fs::read_to_string(home.grants_file()).unwrap(), "plugins = 3 [");
    }
}
