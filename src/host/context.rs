//! [`LoadContext`]: what loading a plugin reads from the host — the home,
//! config.toml and the host environment — and the one rule for which host
//! variables a plugin's `[env]` may see. Holds references only; never loads.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::config::HostConfig;
use crate::home::Home;

/// What loading needs from the host.
pub struct LoadContext<'a> {
    pub home: &'a Home,
    pub config: &'a HostConfig,
    /// The host environment (read for PATH, HOME, passthrough and `${VAR}`).
    pub host_env: &'a dyn Fn(&str) -> Option<OsString>,
}

impl LoadContext<'_> {
    /// The real process environment.
    pub fn process_env(name: &str) -> Option<OsString> {
        std::env::var_os(name)
    }

    /// The `HOME` of the user ctxhost runs as (the host's `HOME`).
    pub fn user_home(&self) -> Option<PathBuf> {
        (self.host_env)("HOME").filter(|h| !h.is_empty()).map(PathBuf::from)
    }

    /// The `HOME` hooks see: `[sandbox] hook_home` (`~` is the user's
    /// home), else `<home>/hook-home` ([`Home::hook_home`]). Everything a
    /// confined hook may write lies in ctxhost's home unless the operator
    /// names another here.
    pub fn hook_home(&self) -> PathBuf {
        let Some(set) = &self.config.sandbox.hook_home else { return self.home.hook_home() };
        match (set.strip_prefix("~"), self.user_home()) {
            (Ok(rest), Some(user)) if rest.as_os_str().is_empty() => user,
            (Ok(rest), Some(user)) => user.join(rest),
            // No HOME to expand `~` with: ctxhost's own default.
            (Ok(_), None) => self.home.hook_home(),
            (Err(_), _) => set.clone(),
        }
    }

    /// What `${VAR}` in plugin `plugin`'s `[env]` expands to: the host's
    /// value only when the operator allowed the variable
    /// (`allowed_env_vars`, or the plugin's grant in `grants.toml`, see
    /// [`crate::host::grants::env_allowed`]); a plugin rewriting its own
    /// plugin.toml gets nothing new.
    pub fn env_access(&self, plugin: &str, var: &str) -> crate::manifest::EnvAccess {
        if crate::host::grants::env_allowed(self.home, &self.config.allowed_env_vars, plugin, var) {
            crate::manifest::EnvAccess::Allowed((self.host_env)(var).map(|v| v.to_string_lossy().into_owned()))
        } else {
            crate::manifest::EnvAccess::Denied
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hook_home_is_inside_ctxhost_home_unless_the_operator_names_one() {
        let home = Home::at("/ctx");
        let env = |k: &str| (k == "HOME").then(|| OsString::from("/home/u"));
        let mut config = HostConfig::default();
        let at = |config: &HostConfig| LoadContext { home: &home, config, host_env: &env }.hook_home();
        assert_eq!(at(&config), PathBuf::from("/ctx/hook-home"));
        for (set, expected) in [("~", "/home/u"), ("~/lf", "/home/u/lf"), ("/srv/hooks", "/srv/hooks")] {
            config.sandbox.hook_home = Some(set.into());
            assert_eq!(at(&config), PathBuf::from(expected), "{set}");
        }
        let cx = LoadContext { home: &home, config: &config, host_env: &env };
        assert_eq!(cx.user_home(), Some(PathBuf::from("/home/u")));
    }
}
