//! Execution settings: how the host runs a plugin's hooks (spec section 2 table).
//!
//! LibreFang's daemon reads these only from `[hooks]`, while its docs, scaffold
//! and registry put them at the top level. Both placements are accepted; when a
//! key is in both, `[hooks]` wins and a warning names the key.

use std::path::PathBuf;

use serde::Deserialize;

use super::error::ManifestErrorKind;
use super::reader::Reader;
use super::runtime::Runtime;

/// What happens when a hook fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailurePolicy {
    /// Log a warning and fall back to the default behaviour.
    #[default]
    Warn,
    /// Fall back silently.
    Skip,
    /// Fail the whole call.
    Abort,
}

/// How a persistent worker frames its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerProtocol {
    /// LibreFang's: one JSON line in, one JSON line out.
    #[default]
    Line,
    /// JSON-RPC, letting a worker call host services (agent-hooks.md).
    Jsonrpc,
}

/// Open the breaker after `max_failures` consecutive failures, for `reset_secs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct CircuitBreaker {
    #[serde(default = "CircuitBreaker::default_max_failures")]
    pub max_failures: u32,
    #[serde(default = "CircuitBreaker::default_reset_secs")]
    pub reset_secs: u64,
}

impl CircuitBreaker {
    fn default_max_failures() -> u32 {
        5
    }
    fn default_reset_secs() -> u64 {
        60
    }
}

impl Default for CircuitBreaker {
    fn default() -> Self {
        CircuitBreaker { max_failures: 5, reset_secs: 60 }
    }
}

/// Every execution setting, with the defaults of spec section 2.
#[derive(Debug, Clone)]
pub struct ExecSettings {
    pub runtime: Runtime,
    pub hook_timeout_secs: u64,
    pub on_hook_failure: FailurePolicy,
    pub max_retries: u32,
    pub retry_delay_ms: u64,
    pub ingest_filter: Option<String>,
    pub ingest_regex: Option<regex::Regex>,
    pub only_for_agent_ids: Vec<String>,
    pub allow_network: bool,
    pub allow_filesystem: bool,
    pub max_memory_mb: Option<u64>,
    pub persistent_subprocess: bool,
    /// One-shot Python hooks go through the plugin's fork server (a ctxhost
    /// extension; `false` spawns every call).
    pub forkserver: bool,
    pub hook_cache_ttl_secs: u64,
    pub assemble_cache_ttl_secs: u64,
    pub compact_cache_ttl_secs: u64,
    pub circuit_breaker: CircuitBreaker,
    pub after_turn_queue_depth: u32,
    pub max_workers: u32,
    pub prewarm_subprocesses: bool,
    pub worker_idle_secs: u64,
    pub worker_protocol: WorkerProtocol,
    pub readable_paths: Vec<PathBuf>,
    pub writable_paths: Vec<PathBuf>,
    pub priority: i64,
}

impl Default for ExecSettings {
    fn default() -> Self {
        ExecSettings {
            runtime: Runtime::Python,
            hook_timeout_secs: 30,
            on_hook_failure: FailurePolicy::Warn,
            max_retries: 0,
            retry_delay_ms: 500,
            ingest_filter: None,
            ingest_regex: None,
            only_for_agent_ids: Vec::new(),
            allow_network: false,
            allow_filesystem: false,
            max_memory_mb: None,
            persistent_subprocess: false,
            forkserver: true,
            hook_cache_ttl_secs: 0,
            assemble_cache_ttl_secs: 0,
            compact_cache_ttl_secs: 0,
            circuit_breaker: CircuitBreaker::default(),
            after_turn_queue_depth: 16,
            max_workers: 1,
            prewarm_subprocesses: false,
            worker_idle_secs: 300,
            worker_protocol: WorkerProtocol::Line,
            readable_paths: Vec::new(),
            writable_paths: Vec::new(),
            priority: 0,
        }
    }
}

/// The fields of `circuit_breaker`.
pub const CIRCUIT_BREAKER_FIELDS: &[&str] = &["max_failures", "reset_secs"];

/// The setting keys, as spelled in plugin.toml.
pub const SETTING_KEYS: &[&str] = &[
    "runtime",
    "hook_timeout_secs",
    "on_hook_failure",
    "max_retries",
    "retry_delay_ms",
    "ingest_filter",
    "ingest_regex",
    "only_for_agent_ids",
    "allow_network",
    "allow_filesystem",
    "max_memory_mb",
    "persistent_subprocess",
    "forkserver",
    "hook_cache_ttl_secs",
    "assemble_cache_ttl_secs",
    "compact_cache_ttl_secs",
    "circuit_breaker",
    "after_turn_queue_depth",
    "max_workers",
    "prewarm_subprocesses",
    "worker_idle_secs",
    "worker_protocol",
    "readable_paths",
    "writable_paths",
    "priority",
];

impl ExecSettings {
    /// Reads every setting from either placement.
    pub(super) fn read(r: &mut Reader<'_>) -> Result<Self, super::ManifestError> {
        let mut s = ExecSettings::default();
        if let Some((tag, key)) = r.setting::<String>("runtime")? {
            let (runtime, warning) = Runtime::from_tag(&tag);
            if let Some(w) = warning {
                r.warn(format!("key `{key}`: {w}"));
            }
            s.runtime = runtime;
        }
        macro_rules! plain {
            ($($field:ident),* $(,)?) => {$(
                if let Some((v, _)) = r.setting(stringify!($field))? {
                    s.$field = v;
                }
            )*};
        }
        plain!(
            on_hook_failure,
            max_retries,
            retry_delay_ms,
            only_for_agent_ids,
            allow_network,
            allow_filesystem,
            persistent_subprocess,
            forkserver,
            hook_cache_ttl_secs,
            assemble_cache_ttl_secs,
            compact_cache_ttl_secs,
            after_turn_queue_depth,
            prewarm_subprocesses,
            worker_idle_secs,
            worker_protocol,
            readable_paths,
            writable_paths,
            priority,
        );
        if let Some((v, key)) = r.setting::<toml::Value>("circuit_breaker")? {
            s.circuit_breaker = r.known_fields(&key, v, CIRCUIT_BREAKER_FIELDS)?;
        }
        if let Some((v, key)) = r.setting::<u64>("hook_timeout_secs")? {
            if v == 0 {
                return Err(r.error(&key, ManifestErrorKind::Invalid("must be at least 1 second".into())));
            }
            s.hook_timeout_secs = v;
        }
        if let Some((v, key)) = r.setting::<u32>("max_workers")? {
            if v == 0 {
                return Err(r.error(&key, ManifestErrorKind::Invalid("must be at least 1".into())));
            }
            s.max_workers = v;
        }
        if let Some((v, key)) = r.setting::<u64>("max_memory_mb")? {
            if v == 0 {
                return Err(r.error(&key, ManifestErrorKind::Invalid("must be at least 1 MiB".into())));
            }
            s.max_memory_mb = Some(v);
        }
        if let Some((v, _)) = r.setting::<String>("ingest_filter")? {
            s.ingest_filter = Some(v);
        }
        if let Some((pattern, key)) = r.setting::<String>("ingest_regex")? {
            let re = regex::Regex::new(&pattern)
                .map_err(|e| r.error(&key, ManifestErrorKind::Invalid(format!("invalid regex: {e}"))))?;
            s.ingest_regex = Some(re);
        }
        Ok(s)
    }
}
