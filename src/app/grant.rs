//! Changing a plugin's grant: the one computation `ctxhost plugin grant`
//! and `PUT /api/plugins/{name}/grants` share. The new grant is what the
//! plugin's manifest asks for now (a FaustBot plugin asks for nothing), plus
//! what the operator adds (the network, the whole filesystem), with the host
//! variables and source builds that only the operator gives, kept from the
//! recorded grant unless changed. The answer says what changed and what the
//! new grant opens that the old one did not.
//!
//! Blocking (it reads the manifest and the records). Never reloads or runs
//! a plugin: the front end decides that.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::app::registry::{self, RegistryError};
use crate::home::Home;
use crate::host::grants::{self, Grant};

/// What the operator asks on top of the manifest's request.
#[derive(Debug, Clone, Default)]
pub struct GrantChange {
    /// Allow the network even when the manifest does not ask for it.
    pub network: bool,
    /// Allow the whole filesystem even when the manifest does not ask for it.
    pub filesystem: bool,
    /// Host variables to add to the recorded ones.
    pub add_env: Vec<String>,
    /// Host variables to take back.
    pub revoke_env: Vec<String>,
    /// `Some`: set source builds; `None`: keep the recorded choice.
    pub source_builds: Option<bool>,
    /// Compute the answer, record nothing.
    pub dry_run: bool,
}

/// The grant recorded (or, on a dry run, that would be).
#[derive(Debug, Clone, Serialize)]
pub struct Granted {
    pub name: String,
    pub grant: Grant,
    /// The grant recorded before, if one was.
    pub before: Option<Grant>,
    /// One line per key that changed (`allow_network: false -> true`).
    pub changes: Vec<String>,
    /// What the new grant allows that the one before did not, in words.
    pub opens: Vec<String>,
    /// [`Grant::summary`] of the new grant.
    pub summary: String,
    /// Where grants are recorded (for messages).
    pub location: String,
    pub dry_run: bool,
}

/// Why a grant could not be changed.
#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    #[error(transparent)]
    NotFound(#[from] Box<RegistryError>),
    #[error("plugin '{name}': {source}")]
    Manifest {
        name: String,
        #[source]
        source: Box<crate::manifest::ManifestError>,
    },
    #[error("`env`: {0:?} is not a valid environment variable name (empty, or holds `=` or NUL)")]
    BadEnv(String),
    #[error(transparent)]
    Records(#[from] crate::host::filestore::StoreError),
}

/// Computes plugin `name`'s new grant from its manifest and `change`, and
/// records it unless `change.dry_run`.
///
/// # Errors
/// No such plugin, a manifest that does not load, a bad variable name, or
/// the records cannot be read or written.
pub fn grant(home: &Home, name: &str, change: &GrantChange) -> Result<Granted, GrantError> {
    let dir = registry::plugin_dir(home, name).map_err(Box::new)?;
    if let Some(bad) = change.add_env.iter().find(|v| !crate::manifest::valid_env_name(v)) {
        return Err(GrantError::BadEnv(bad.clone()));
    }
    let recorded = grants::get(home, name)?;
    let mut requested = if crate::faust::is_faust_plugin(&dir) {
        // plugin.json asks for no privileges: the grant is the operator's alone.
        recorded.clone().unwrap_or_default()
    } else {
        let lookup = |v: &str| std::env::var(v).ok();
        let loaded = crate::manifest::Manifest::load_with_env(&dir, &lookup)
            .map_err(|source| GrantError::Manifest { name: name.to_owned(), source: Box::new(source) })?;
        Grant::requested(&loaded.manifest.settings)
    };
    requested.allow_network |= change.network;
    requested.allow_filesystem |= change.filesystem;
    // Variables are the operator's alone: kept from the grant in force.
    let mut env: BTreeSet<String> = recorded.as_ref().map(|g| g.env.clone()).unwrap_or_default().into_iter().collect();
    env.extend(change.add_env.iter().cloned());
    env.retain(|v| !change.revoke_env.contains(v));
    requested.env = env.into_iter().collect();
    // The operator's alone: kept from the recorded grant unless changed here.
    requested.source_builds =
        change.source_builds.unwrap_or_else(|| recorded.as_ref().is_some_and(|g| g.source_builds));
    let before = if change.dry_run { recorded } else { grants::set(home, name, requested.clone())? };
    Ok(Granted {
        name: name.to_owned(),
        changes: before.as_ref().map(|b| requested.changes_from(b)).unwrap_or_default(),
        opens: opens(before.as_ref(), &requested),
        summary: requested.summary(),
        location: grants::location(home),
        grant: requested,
        before,
        dry_run: change.dry_run,
    })
}

/// What `after` allows that `before` (none: nothing) did not, in words.
pub fn opens(before: Option<&Grant>, after: &Grant) -> Vec<String> {
    let none = Grant::default();
    let before = before.unwrap_or(&none);
    let mut out = Vec::new();
    if after.allow_network && !before.allow_network {
        out.push("network access".to_owned());
    }
    if after.allow_filesystem && !before.allow_filesystem {
        out.push("the whole filesystem".to_owned());
    }
    for p in after.readable_paths.iter().filter(|p| !before.readable_paths.contains(p)) {
        out.push(format!("read {}", p.display()));
    }
    for p in after.writable_paths.iter().filter(|p| !before.writable_paths.contains(p)) {
        out.push(format!("write {}", p.display()));
    }
    for v in after.env.iter().filter(|v| !before.env.contains(v)) {
        out.push(format!("host variable {v}"));
    }
    if after.source_builds && !before.source_builds {
        out.push("source builds (pip runs build code)".to_owned());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_names_only_what_is_new() {
        let before = Grant { allow_network: true, readable_paths: vec!["/a".into()], ..Grant::default() };
        let after = Grant {
            allow_network: true,
            allow_filesystem: true,
            readable_paths: vec!["/a".into(), "/b".into()],
            writable_paths: vec!["/w".into()],
            env: vec!["KEY".into()],
            source_builds: true,
        };
        assert_eq!(
            opens(Some(&before), &after),
            ["the whole filesystem", "read /b", "write /w", "host variable KEY", "source builds (pip runs build code)"]
        );
        assert!(opens(Some(&after), &before).is_empty(), "narrowing opens nothing");
        assert_eq!(opens(None, &before), ["network access", "read /a"]);
    }
}
