//! `config.toml`: the operator's settings for the host (spec section 12).
//!
//! Only what the host itself reads lives here; a missing file means all
//! defaults. Unknown keys are kept out of the way with a warning, never fatal.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::{Map, Value};

/// Settings read from `config.toml`.
/// Default process-count limit of one call: none. A limit needs a per-call
/// cgroup, and joining one costs the hook's start an RCU grace period on a
/// kernel whose cgroups are not mounted with `favordynmods`: measured here
/// 0.03 ms when calls follow each other closely, but 8-15 ms when they are
/// 50 ms apart — more than a whole one-shot call. So cgroups are used only
/// when a limit asks for one (`[sandbox] max_processes`, `max_memory_mb`).
pub const DEFAULT_MAX_PROCESSES: u64 = 0;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default)]
pub struct HostConfig {
    /// Host variables passed through to every hook (after the runtime's own).
    pub allowed_env_vars: Vec<String>,
    /// Per plugin: values overriding its `[config.*]` defaults.
    pub plugin_config: BTreeMap<String, Map<String, Value>>,
    /// At most this many hook processes run at once, host-wide; more queue.
    pub max_concurrent_hooks: usize,
    pub context_engine: ContextEngineConfig,
    pub memory: MemoryConfig,
    pub store: StoreConfig,
    pub server: ServerConfig,
    pub sandbox: SandboxConfig,
    pub plugins: PluginsConfig,
    pub faustbot: FaustbotConfig,
    pub runner: RunnerConfig,
}

/// `[runner]`: how script hooks are run.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunnerConfig {
    /// One-shot Python hooks go through a per-plugin fork server (`false`:
    /// every call spawns an interpreter).
    pub python_forkserver: bool,
}

impl Default for RunnerConfig {
    fn default() -> Self {
        RunnerConfig { python_forkserver: true }
    }
}

/// `[plugins]`: how the host treats installed plugins.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PluginsConfig {
    /// Agent-loop plugins the host may start without: when one cannot run
    /// (its state under `<home>/agent/plugins/<name>/` is corrupt or cannot
    /// be made) it is left out with a warning instead of stopping the start.
    pub optional: Vec<String>,
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            allowed_env_vars: Vec::new(),
            plugin_config: BTreeMap::new(),
            max_concurrent_hooks: 32,
            context_engine: ContextEngineConfig::default(),
            memory: MemoryConfig::default(),
            store: StoreConfig::default(),
            server: ServerConfig::default(),
            sandbox: SandboxConfig::default(),
            plugins: PluginsConfig::default(),
            faustbot: FaustbotConfig::default(),
            runner: RunnerConfig::default(),
        }
    }
}

/// `[context_engine]`, in LibreFang's shape.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default)]
pub struct ContextEngineConfig {
    /// One plugin (a stack of one).
    pub plugin: Option<String>,
    /// Several plugins, in order (overrides `plugin`).
    pub plugin_stack: Vec<String>,
    /// Order of recalled memories among the stack (higher first, default 1.0).
    pub plugin_stack_weights: BTreeMap<String, f64>,
    /// Manual hooks: a `[hooks]` table as in plugin.toml, paths relative to
    /// the config file's directory.
    pub hooks: Option<toml::Table>,
    pub stable_prefix_mode: bool,
    /// Caps the default recall only.
    pub max_recall_results: usize,
    pub context_window_tokens: u64,
    /// `after_turn` text sent to plugins is cut to this many characters (0: no cut).
    pub after_turn_text_limit: usize,
    /// Tries a journaled `after_turn` call gets before it is kept as a dead letter.
    pub after_turn_max_attempts: u32,
    /// The wait after a failed journaled `after_turn` call, doubled after
    /// each further failure (up to 5 minutes).
    pub after_turn_retry_ms: u64,
}

impl Default for ContextEngineConfig {
    fn default() -> Self {
        ContextEngineConfig {
            plugin: None,
            plugin_stack: Vec::new(),
            plugin_stack_weights: BTreeMap::new(),
            hooks: None,
            stable_prefix_mode: false,
            max_recall_results: 5,
            context_window_tokens: 128_000,
            after_turn_text_limit: 500,
            after_turn_max_attempts: 5,
            after_turn_retry_ms: 1000,
        }
    }
}

impl ContextEngineConfig {
    /// The plugins of the stack, in order: `plugin_stack`, else `plugin`.
    pub fn stack(&self) -> Vec<String> {
        if !self.plugin_stack.is_empty() { self.plugin_stack.clone() } else { self.plugin.iter().cloned().collect() }
    }

    /// A plugin's weight in the stack (default 1.0).
    pub fn weight(&self, plugin: &str) -> f64 {
        self.plugin_stack_weights.get(plugin).copied().unwrap_or(1.0)
    }
}

/// `[memory]`: the built-in memory.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct MemoryConfig {
    /// The database file [default: `<home>/memory.db`].
    pub path: Option<std::path::PathBuf>,
}

/// `[store]`: where the shared state lives (vfs, triggers, storage, config
/// values, enable state, the after_turn journal).
#[derive(Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// A PostgreSQL URL (`postgres://user@host/db`, `?host=/socket/dir`);
    /// `CTXHOST_STORE_URL` wins. None: SQLite in the home (`state.db`).
    pub url: Option<String>,
}

/// The variable naming the store's URL; it wins over `[store] url` (as the
/// environment wins over the file everywhere else: `CTXHOST_TOKEN`).
pub const STORE_URL_VAR: &str = "CTXHOST_STORE_URL";

impl StoreConfig {
    /// The URL in force: `CTXHOST_STORE_URL` (from `env`) when set and not
    /// empty, else `[store] url`; `None` is the embedded SQLite store.
    pub fn effective_url(&self, env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
        env(STORE_URL_VAR)
            .filter(|u| !u.trim().is_empty())
            .or_else(|| self.url.clone().filter(|u| !u.trim().is_empty()))
    }
}

/// The password never shows, also in `{:?}` of the whole config.
impl std::fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreConfig").field("url", &self.url.as_deref().map(redact_url)).finish()
    }
}

/// `url` with its password replaced by `***`: the one of the user part
/// (`postgres://user:secret@…`) and any `password=` parameter (URL query
/// or `key=value` form). What every message and log shows of a store URL.
pub fn redact_url(url: &str) -> String {
    let mut out = url.to_owned();
    if let Some(scheme_end) = out.find("://") {
        let rest_start = scheme_end + 3;
        let authority_end = out[rest_start..].find(['/', '?']).map_or(out.len(), |i| rest_start + i);
        if let Some(at) = out[rest_start..authority_end].rfind('@').map(|i| rest_start + i)
            && let Some(colon) = out[rest_start..at].find(':').map(|i| rest_start + i)
        {
            out.replace_range(colon + 1..at, "***");
        }
    }
    let mut redacted = String::with_capacity(out.len());
    let mut rest = out.as_str();
    while let Some(i) = rest.to_ascii_lowercase().find("password=") {
        let value_start = i + "password=".len();
        redacted.push_str(&rest[..value_start]);
        redacted.push_str("***");
        let tail = &rest[value_start..];
        let end = if tail.starts_with('\'') {
            // key='quoted value' (a \' inside is an escaped quote).
            let mut end = tail.len();
            let mut escaped = false;
            for (j, c) in tail.char_indices().skip(1) {
                match c {
                    '\\' if !escaped => escaped = true,
                    '\'' if !escaped => {
                        end = j + 1;
                        break;
                    }
                    _ => escaped = false,
                }
            }
            end
        } else {
            tail.find(['&', ' ', '\t']).unwrap_or(tail.len())
        };
        rest = &tail[end..];
    }
    redacted.push_str(rest);
    redacted
}

/// `[server]`: `ctxhost serve`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default)]
pub struct ServerConfig {
    /// Bearer token guarding the mutating routes (`--token` and `CTXHOST_TOKEN` win).
    pub token: Option<String>,
    /// Address to bind (`--addr` wins) [default: 127.0.0.1:4545].
    pub addr: Option<String>,
    /// Open connections at most; one more is answered 503 and closed [default: 1024].
    pub max_connections: usize,
    /// A connection must send a whole request head within this many seconds
    /// of opening or of its previous response, else it is closed: bounds slow
    /// headers and idle keep-alive connections alike [default: 10].
    pub header_timeout_secs: u64,
    /// A request (reading its body and answering it) taking longer is
    /// answered 503 [default: 300].
    pub request_timeout_secs: u64,
    /// A request body larger than this is refused with 413 [default: 16 MiB].
    pub max_body_bytes: u64,
    /// Request bodies held in memory at once, all requests together; a body
    /// that does not fit is refused with 503 [default: 128 MiB].
    pub max_body_bytes_in_flight: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            token: None,
            addr: None,
            max_connections: 1024,
            header_timeout_secs: 10,
            request_timeout_secs: 300,
            max_body_bytes: 16 * 1024 * 1024,
            max_body_bytes_in_flight: 128 * 1024 * 1024,
        }
    }
}

const SERVER_KEYS: &[&str] = &[
    "token",
    "addr",
    "max_connections",
    "header_timeout_secs",
    "request_timeout_secs",
    "max_body_bytes",
    "max_body_bytes_in_flight",
];

impl ServerConfig {
    /// The limits must be usable: every one positive, a body fits the budget.
    fn check(&self) -> Result<(), String> {
        let positive = [
            ("max_connections", self.max_connections as u64),
            ("header_timeout_secs", self.header_timeout_secs),
            ("request_timeout_secs", self.request_timeout_secs),
            ("max_body_bytes", self.max_body_bytes),
            ("max_body_bytes_in_flight", self.max_body_bytes_in_flight),
        ];
        if let Some((key, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(format!("`server.{key}` must be greater than 0"));
        }
        if self.max_body_bytes > self.max_body_bytes_in_flight {
            return Err(format!(
                "`server.max_body_bytes` ({}) must not exceed `server.max_body_bytes_in_flight` ({})",
                self.max_body_bytes, self.max_body_bytes_in_flight
            ));
        }
        Ok(())
    }
}

/// `[sandbox]`: the script sandbox (spec section 6).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxConfig {
    /// Refuse to run script hooks when this machine cannot apply the whole
    /// sandbox (Landlock, network namespace, cgroup limits) [default: false].
    pub require: bool,
    /// At most this many processes per hook call, the hook included (0: no
    /// limit) [default: 0]. A limit puts every call in its own cgroup (also
    /// killed whole at the end of the call), which costs each hook start a
    /// cgroup migration: up to ~15 ms on kernels without `favordynmods`.
    pub max_processes: u64,
    /// The `HOME` hook processes see [default: `<home>/hook-home`]: an
    /// absolute path, or `~` / `~/…` for the user's home. LibreFang plugins
    /// keep their state in `$HOME/.librefang/plugins/<name>/`; set `"~"` to
    /// share that state with a LibreFang install on this machine (hooks
    /// then write there, and only there, in your home).
    pub hook_home: Option<std::path::PathBuf>,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig { require: false, max_processes: DEFAULT_MAX_PROCESSES, hook_home: None }
    }
}

impl SandboxConfig {
    fn check(&self) -> Result<(), String> {
        match &self.hook_home {
            Some(p) if !(p.is_absolute() || p.starts_with("~")) => {
                Err(format!("`sandbox.hook_home = \"{}\"` must be an absolute path or start with `~`", p.display()))
            }
            _ => Ok(()),
        }
    }
}

/// `[faustbot]`: FaustBot plugins (plugin.json).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FaustbotConfig {
    /// Install a FaustBot plugin's missing or changed dependencies when the
    /// engine starts or reloads it [default: false]. Off, they are installed
    /// only by `ctxhost plugin deps <id>`, and a plugin whose dependencies are
    /// not installed fails to start with an error naming that command.
    pub install_deps_at_start: bool,
}

const ENGINE_KEYS: &[&str] = &[
    "plugin",
    "plugin_stack",
    "plugin_stack_weights",
    "hooks",
    "stable_prefix_mode",
    "max_recall_results",
    "context_window_tokens",
    "after_turn_text_limit",
    "after_turn_max_attempts",
    "after_turn_retry_ms",
];

/// A config.toml that could not be read or parsed.
#[derive(Debug, thiserror::Error)]
#[error("invalid config file `{}`: {reason}", file.display())]
pub struct ConfigError {
    pub file: std::path::PathBuf,
    pub reason: String,
}

/// Every key of config.toml `load` knows, by table (`""` is the top level).
/// An unknown key is warned about and ignored, except in the tables of
/// [`STRICT_TABLES`], where it is an error. `docs/reference/config.md`
/// documents exactly these (checked by `tests/docs_reference.rs`).
pub const KEYS: &[(&str, &[&str])] = &[
    ("", KNOWN_KEYS),
    ("context_engine", ENGINE_KEYS),
    ("memory", MEMORY_KEYS),
    ("store", STORE_KEYS),
    ("server", SERVER_KEYS),
    ("sandbox", SANDBOX_KEYS),
    ("plugins", PLUGINS_KEYS),
    ("faustbot", FAUSTBOT_KEYS),
    ("runner", RUNNER_KEYS),
];

/// Tables whose unknown keys fail the load: a misspelt key there would
/// silently weaken the sandbox, change what is installed or started, or
/// (`[store]`) give one instance a state of its own.
pub const STRICT_TABLES: &[&str] = &["sandbox", "plugins", "faustbot", "store", "runner"];

const MEMORY_KEYS: &[&str] = &["path"];
const STORE_KEYS: &[&str] = &["url"];
const SANDBOX_KEYS: &[&str] = &["require", "max_processes", "hook_home"];
const PLUGINS_KEYS: &[&str] = &["optional"];
const FAUSTBOT_KEYS: &[&str] = &["install_deps_at_start"];
const RUNNER_KEYS: &[&str] = &["python_forkserver"];

const KNOWN_KEYS: &[&str] = &[
    "allowed_env_vars",
    "plugin_config",
    "max_concurrent_hooks",
    "context_engine",
    "memory",
    "store",
    "server",
    "sandbox",
    "plugins",
    "faustbot",
    "runner",
];

impl HostConfig {
    /// Reads `file`; a missing file yields the defaults. Returns the config
    /// and one warning per unknown top-level key.
    ///
    /// # Errors
    /// Unreadable file, bad TOML (the message names the line), or a known key
    /// of the wrong type.
    pub fn load(file: &Path) -> Result<(HostConfig, Vec<String>), ConfigError> {
        let fail = |reason: String| ConfigError { file: file.to_owned(), reason };
        let text = match std::fs::read_to_string(file) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((HostConfig::default(), Vec::new())),
            Err(e) => return Err(fail(format!("cannot read it: {e}"))),
        };
        let mut table: toml::Table = toml::from_str(&text).map_err(|e| fail(e.to_string().trim_end().to_owned()))?;
        let mut warnings = Vec::new();
        for (section, known) in KEYS {
            if section.is_empty() {
                drop_unknown(&mut table, known, "", file, &mut warnings);
                continue;
            }
            let Some(toml::Value::Table(t)) = table.get_mut(*section) else { continue };
            if STRICT_TABLES.contains(section) {
                if let Some(key) = t.keys().find(|k| !known.contains(&k.as_str())) {
                    let hint = crate::hint::did_you_mean(key, known.iter().copied());
                    return Err(fail(format!("unknown key `{section}.{key}`{hint} (known: {})", known.join(", "))));
                }
            } else {
                drop_unknown(t, known, &format!("{section}."), file, &mut warnings);
            }
        }
        let config: HostConfig =
            toml::Value::Table(table).try_into().map_err(|e: toml::de::Error| fail(e.to_string()))?;
        config.server.check().map_err(fail)?;
        config.sandbox.check().map_err(fail)?;
        Ok((config, warnings))
    }
}

/// Removes the keys of `table` not in `known`, with a warning each.
fn drop_unknown(table: &mut toml::Table, known: &[&str], prefix: &str, file: &Path, warnings: &mut Vec<String>) {
    table.retain(|key, _| {
        let ok = known.contains(&key);
        if !ok {
            let hint = crate::hint::did_you_mean(key, known.iter().copied());
            warnings.push(format!("{}: unknown key `{prefix}{key}` is ignored{hint}", file.display()));
        }
        ok
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each listed key is a field of its struct: a value no field accepts
    /// (`-1`: no field is a signed number) fails for it, where a key the
    /// struct lacks would pass.
    #[test]
    fn every_listed_key_is_a_field_and_every_field_is_listed() {
        for (section, keys) in KEYS {
            for key in *keys {
                let text =
                    if section.is_empty() { format!("{key} = -1\n") } else { format!("[{section}]\n{key} = -1\n") };
                let parsed = toml::from_str::<HostConfig>(&text);
                assert!(parsed.is_err(), "`{section}.{key}` is listed but HostConfig does not read it");
            }
        }
        let structs = [
            ("", fields(&format!("{:?}", HostConfig::default()))),
            ("context_engine", fields(&format!("{:?}", ContextEngineConfig::default()))),
            ("memory", fields(&format!("{:?}", MemoryConfig::default()))),
            ("store", fields(&format!("{:?}", StoreConfig::default()))),
            ("server", fields(&format!("{:?}", ServerConfig::default()))),
            ("sandbox", fields(&format!("{:?}", SandboxConfig::default()))),
            ("plugins", fields(&format!("{:?}", PluginsConfig::default()))),
            ("faustbot", fields(&format!("{:?}", FaustbotConfig::default()))),
            ("runner", fields(&format!("{:?}", RunnerConfig::default()))),
        ];
        for (section, fields) in structs {
            let listed: Vec<String> = KEYS
                .iter()
                .find(|(s, _)| *s == section)
                .map(|(_, k)| k.iter().map(|k| (*k).to_owned()).collect())
                .unwrap_or_default();
            assert_eq!(fields, listed, "the fields of `[{section}]` and its KEYS entry differ");
        }
    }

    /// The field names of a struct's `Debug` text (`Name { a: …, b: … }`).
    fn fields(debug: &str) -> Vec<String> {
        let (mut depth, mut out, mut start) = (0, Vec::new(), None);
        for (i, c) in debug.char_indices() {
            match c {
                '{' | '[' | '(' => {
                    depth += 1;
                    start = (depth == 1).then_some(i + 1);
                }
                '}' | ']' | ')' => depth -= 1,
                ',' if depth == 1 => start = Some(i + 1),
                ':' if depth == 1 => {
                    if let Some(s) = start.take() {
                        out.push(debug[s..i].trim().to_owned());
                    }
                }
                _ => {}
            }
        }
        out
    }

    #[test]
    fn missing_file_is_defaults_and_unknown_keys_warn() {
        let dir = tempfile::tempdir().unwrap();
        let (c, w) = HostConfig::load(&dir.path().join("nope.toml")).unwrap();
        assert_eq!(c, HostConfig::default());
        assert!(w.is_empty());

        let file = dir.path().join("config.toml");
        std::fs::write(&file, "allowed_env_vars = [\"LANG\"]\nallowed_env_var = 1\n[plugin_config.p]\nsize = 3\n")
            .unwrap();
        let (c, w) = HostConfig::load(&file).unwrap();
        assert_eq!(c.allowed_env_vars, ["LANG"]);
        assert_eq!(c.plugin_config["p"]["size"], 3);
        assert_eq!(w.len(), 1);
        assert!(
            w[0].ends_with("unknown key `allowed_env_var` is ignored; did you mean `allowed_env_vars`?"),
            "{}",
            w[0]
        );

        std::fs::write(
            &file,
            "max_concurrent_hooks = 4\n[context_engine]\nplugin_stack = [\"a\", \"b\"]\nplugin = \"c\"\n\
             plugin_stack_weights = { b = 2.0 }\nmax_recal_results = 3\n[memory]\npath = \"/m.db\"\n",
        )
        .unwrap();
        let (c, w) = HostConfig::load(&file).unwrap();
        assert_eq!(c.max_concurrent_hooks, 4);
        assert_eq!(c.context_engine.stack(), ["a", "b"], "plugin_stack overrides plugin");
        assert_eq!((c.context_engine.weight("a"), c.context_engine.weight("b")), (1.0, 2.0));
        assert_eq!(c.context_engine.max_recall_results, 5);
        assert_eq!(c.memory.path.as_deref(), Some(Path::new("/m.db")));
        assert_eq!(w.len(), 1);
        assert!(
            w[0].ends_with("`context_engine.max_recal_results` is ignored; did you mean `max_recall_results`?"),
            "{w:?}"
        );

        std::fs::write(&file, "[server]\nmax_connections = 8\nmax_body_bytes = 1024\nmax_conections = 3\n").unwrap();
        let (c, w) = HostConfig::load(&file).unwrap();
        assert_eq!((c.server.max_connections, c.server.max_body_bytes), (8, 1024));
        assert_eq!(c.server.header_timeout_secs, 10);
        assert!(w[0].ends_with("`server.max_conections` is ignored; did you mean `max_connections`?"), "{w:?}");
        std::fs::write(&file, "[server]\nmax_body_bytes = 2048\nmax_body_bytes_in_flight = 1024\n").unwrap();
        let err = HostConfig::load(&file).unwrap_err().to_string();
        assert!(err.contains("`server.max_body_bytes` (2048) must not exceed"), "{err}");
        std::fs::write(&file, "[server]\nheader_timeout_secs = 0\n").unwrap();
        let err = HostConfig::load(&file).unwrap_err().to_string();
        assert!(err.ends_with("`server.header_timeout_secs` must be greater than 0"), "{err}");

        std::fs::write(&file, "[sandbox]\nhook_home = \"~/lf\"\n").unwrap();
        let (c, _) = HostConfig::load(&file).unwrap();
        assert_eq!(c.sandbox.hook_home.as_deref(), Some(Path::new("~/lf")));
        std::fs::write(&file, "[sandbox]\nhook_home = \"rel/dir\"\n").unwrap();
        let err = HostConfig::load(&file).unwrap_err().to_string();
        assert!(err.ends_with("`sandbox.hook_home = \"rel/dir\"` must be an absolute path or start with `~`"), "{err}");
        std::fs::write(&file, "[sandbox]\nrequre = true\n[memory]\npathh = \"/x\"\n").unwrap();
        let err = HostConfig::load(&file).unwrap_err().to_string();
        assert!(err.contains("unknown key `sandbox.requre`; did you mean `require`?"), "{err}");
        std::fs::write(&file, "[memory]\npathh = \"/x\"\n").unwrap();
        let (_, w) = HostConfig::load(&file).unwrap();
        assert!(w[0].ends_with("`memory.pathh` is ignored; did you mean `path`?"), "{w:?}");

        std::fs::write(&file, "allowed_env_vars = [\n").unwrap();
        let err = HostConfig::load(&file).unwrap_err().to_string();
        assert!(err.contains("line 1"), "{err}");
    }

    #[test]
    fn store_url_from_the_file_or_the_variable_and_never_its_password() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.toml");
        std::fs::write(&file, "[store]\nurl = \"postgres://ctx:hunter2@db.example/ctx?sslmode=disable\"\n").unwrap();
        let (c, _) = HostConfig::load(&file).unwrap();
        let none = |_: &str| None;
        assert_eq!(
            c.store.effective_url(&none).as_deref(),
            Some("postgres://ctx:hunter2@db.example/ctx?sslmode=disable")
        );
        let env = |k: &str| (k == STORE_URL_VAR).then(|| "postgres://other@/x?host=/run/pg".to_owned());
        assert_eq!(
            c.store.effective_url(&env).as_deref(),
            Some("postgres://other@/x?host=/run/pg"),
            "the variable wins"
        );
        let empty = |_: &str| Some(String::new());
        assert!(c.store.effective_url(&empty).is_some(), "an empty variable is no URL");
        assert!(HostConfig::default().store.effective_url(&none).is_none(), "no URL: SQLite");
        let debug = format!("{c:?}");
        assert!(!debug.contains("hunter2") && debug.contains("postgres://ctx:***@db.example/ctx"), "{debug}");
        // A misspelt key would leave this instance on a state of its own.
        std::fs::write(&file, "[store]\nurll = \"postgres://x\"\n").unwrap();
        let err = HostConfig::load(&file).unwrap_err().to_string();
        assert!(err.contains("unknown key `store.urll`") && err.contains("did you mean `url`"), "{err}");

        for (url, want) in [
            ("postgres://u:p%40ss@h:5432/db", "postgres://u:***@h:5432/db"),
            ("postgres://u@h/db?password=s3&host=/x", "postgres://u@h/db?password=***&host=/x"),
            ("postgresql://u:a:b@h/db", "postgresql://u:***@h/db"),
            ("host=/tmp user=u password='s3 c\\'ret' dbname=d", "host=/tmp user=u password=*** dbname=d"),
            ("host=h PASSWORD=plain dbname=d", "host=h PASSWORD=*** dbname=d"),
            ("postgres://u@/db?host=/run/a@b", "postgres://u@/db?host=/run/a@b"),
        ] {
            assert_eq!(redact_url(url), want, "{url}");
        }
    }
}
