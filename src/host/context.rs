//! [`LoadContext`]: what loading a plugin reads from the host — the home,
//! config.toml and the host environment — and the one rule for which host
//! variables a plugin's `[env]` may see. Holds references only; never loads.

use std::ffi::OsString;

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
