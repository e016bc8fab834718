//! The status record of one plugin — the one answer every surface gives
//! (`doctor`, `plugin list`, `GET /api/plugins`, the agent-loop lists) — and
//! what can be told about a plugin from its files alone (`Peek`), for one
//! that does not load or is not loaded.
//!
//! Pure data: nothing here loads, runs or writes anything.

use std::path::Path;

use serde::Serialize;

use crate::manifest::{MANIFEST_FILE, Runtime};
use crate::protocol::HookName;

/// How a plugin runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A script started per call (`runtime` = python, node, bash, …).
    Script,
    /// A persistent worker speaking LibreFang's line protocol.
    Worker,
    /// A persistent worker speaking JSON-RPC (host services).
    JsonrpcWorker,
    /// A wasm component (`component = "….wasm"`).
    Component,
    /// LibreFang's per-hook wasm core modules.
    CoreModules,
    /// A FaustBot plugin (plugin.json + impl.py).
    Faustbot,
    /// Nothing readable says (no or an unreadable manifest).
    Unknown,
}

/// Whether a plugin runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// It loaded and passed every check: it runs.
    Loaded,
    /// The operator turned it off (or its plugin.json does): not loaded.
    Disabled,
    /// It would not run; `error` says why.
    Error,
}

/// One plugin as every surface reports it. The fields of `GET /api/plugins`
/// (`name`, `version`, `runtime`, `hooks`, `enabled`, `error`) and of
/// LibreFang's doctor (`runtime_available`, `hooks_valid`, `install_hint`,
/// `missing_binaries`) are kept; the rest is ctxhost's.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PluginStatus {
    pub name: String,
    pub version: String,
    /// The runtime label (`python`, `wasm`, a custom launcher's path, `unknown`).
    pub runtime: String,
    pub hooks: Vec<String>,
    pub enabled: bool,
    /// Why it would not run (`state` is `error`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub kind: Kind,
    pub state: State,
    /// Load warnings: unknown keys with a "did you mean", grants narrowed, …
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Its launcher was found (always for wasm).
    pub runtime_available: bool,
    /// Its hooks load and can be started (a missing launcher aside).
    pub hooks_valid: bool,
    pub install_hint: String,
    /// `[[requires]]` binaries not on PATH.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing_binaries: Vec<String>,
    /// A layer of the context engine's stack.
    pub in_stack: bool,
    /// A member of the agent loop.
    pub in_agent_loop: bool,
    /// A Python script plugin: whether its one-shot hooks run through a
    /// fork server, and why not when not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forkserver: Option<ForkserverUse>,
    /// `sha256:<hex>` over the files that define it (`content.rs`): what
    /// instances on one store compare.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_hash: Option<String>,
}

/// Whether a Python plugin's one-shot hooks run through its fork server.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ForkserverUse {
    pub used: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why_not: Option<String>,
}

impl ForkserverUse {
    /// From the runner's decision (`runner::process::forkserver_decision`).
    pub fn of(decision: Result<(), &str>) -> ForkserverUse {
        match decision {
            Ok(()) => ForkserverUse { used: true, why_not: None },
            Err(why) => ForkserverUse { used: false, why_not: Some(why.to_owned()) },
        }
    }
}

impl PluginStatus {
    /// A status from what the files say, before any load: not yet in
    /// either engine, no error.
    pub(crate) fn from_peek(name: &str, peek: &Peek, enabled: bool) -> PluginStatus {
        PluginStatus {
            name: name.to_owned(),
            version: peek.version.clone(),
            runtime: peek.runtime_label.clone(),
            hooks: Vec::new(),
            enabled,
            error: None,
            kind: peek.kind,
            state: if enabled { State::Loaded } else { State::Disabled },
            warnings: Vec::new(),
            runtime_available: true,
            hooks_valid: true,
            install_hint: peek
                .runtime
                .as_ref()
                .map(|r| crate::runner::process::runtime_info(r).install_hint.to_owned())
                .unwrap_or_default(),
            missing_binaries: Vec::new(),
            in_stack: false,
            in_agent_loop: false,
            forkserver: None,
            content_hash: None,
        }
    }

    /// Marks it as not running, for `error`.
    pub(crate) fn fail(&mut self, error: String) {
        self.state = State::Error;
        self.error = Some(error);
        self.hooks_valid = false;
        self.in_stack = false;
        self.in_agent_loop = false;
    }
}

/// What a plugin directory says about itself without loading: read from
/// plugin.toml (or plugin.json) leniently — for a plugin that does not
/// load, is disabled, or to pick the loader.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Peek {
    /// `""` when unreadable.
    pub version: String,
    /// `None` when unreadable.
    pub runtime: Option<Runtime>,
    /// `unknown` when unreadable.
    pub runtime_label: String,
    pub kind: Kind,
    /// It asks for the agent loop: a FaustBot plugin, an agent hook (or a
    /// key misspelling one), a jsonrpc worker, or agent declarations.
    pub agent: bool,
}

impl Peek {
    /// Reads `dir`'s manifest (beneath the dir, never through a link, as a
    /// load would); unreadable facts stay unknown.
    pub fn read(dir: &Path) -> Peek {
        if crate::faust::is_faust_plugin(dir) {
            let version = crate::faust::manifest::read_plugin_json(dir)
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                .and_then(|v| v.get("version").and_then(|v| v.as_str()).map(str::to_owned))
                .unwrap_or_else(|| "0.1.0".to_owned());
            return Peek {
                version,
                runtime: Some(Runtime::Python),
                runtime_label: "python".to_owned(),
                kind: Kind::Faustbot,
                agent: true,
            };
        }
        let unknown = Peek {
            version: String::new(),
            runtime: None,
            runtime_label: "unknown".to_owned(),
            kind: Kind::Unknown,
            agent: false,
        };
        let Some(table) = crate::manifest::beneath::Root::open(dir)
            .and_then(|root| root.read_to_string(Path::new(MANIFEST_FILE), crate::manifest::beneath::MANIFEST_LIMIT))
            .ok()
            .and_then(|t| toml::from_str::<toml::Table>(&t).ok())
        else {
            return unknown;
        };
        Peek::from_table(&table)
    }

    fn from_table(table: &toml::Table) -> Peek {
        let hooks = table.get("hooks").and_then(toml::Value::as_table);
        // A setting may sit in [hooks] or at the top; [hooks] wins.
        let setting = |key: &str| hooks.and_then(|h| h.get(key)).or_else(|| table.get(key));
        let version = table.get("version").and_then(|v| v.as_str()).unwrap_or_default().to_owned();
        let tag = setting("runtime").and_then(|v| v.as_str()).unwrap_or("python");
        let runtime = Runtime::from_tag(tag).0;
        let jsonrpc = setting("worker_protocol").and_then(|v| v.as_str()) == Some("jsonrpc");
        let persistent = setting("persistent_subprocess").and_then(|v| v.as_bool()).unwrap_or(false);
        let kind = if runtime == Runtime::Wasm {
            if table.contains_key("component") { Kind::Component } else { Kind::CoreModules }
        } else if persistent && jsonrpc {
            Kind::JsonrpcWorker
        } else if persistent {
            Kind::Worker
        } else {
            Kind::Script
        };
        let agent_names: Vec<&str> = HookName::AGENT.iter().map(|h| h.as_str()).collect();
        let all_names: Vec<&str> = HookName::ALL.iter().map(|h| h.as_str()).collect();
        let agent_hook = hooks.is_some_and(|h| {
            h.keys().any(|k| {
                // An exact agent hook, or a key whose nearest hook is one (a misspelling).
                crate::hint::closest(k, all_names.iter().copied()).is_some_and(|c| agent_names.contains(&c))
            })
        });
        let declares = ["tools", "schedules", "agent_config", "prompt_suffix", "frontend", "heartbeat_secs"]
            .iter()
            .any(|k| table.contains_key(*k));
        Peek {
            version,
            runtime_label: runtime.label(),
            runtime: Some(runtime),
            kind,
            agent: agent_hook || jsonrpc || declares,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peek(text: &str) -> Peek {
        Peek::from_table(&toml::from_str(text).unwrap())
    }

    #[test]
    fn kinds_and_agent_membership_from_the_manifest_alone() {
        let p = peek("version = \"1\"\n[hooks]\nruntime = \"bash\"\ningest = \"i.sh\"\n");
        assert_eq!((p.kind, p.agent, p.version.as_str(), p.runtime_label.as_str()), (Kind::Script, false, "1", "bash"));
        let p = peek("[hooks]\npersistent_subprocess = true\nworker_protocol = \"jsonrpc\"\ningest = \"i.py\"\n");
        assert_eq!((p.kind, p.agent), (Kind::JsonrpcWorker, true));
        let p = peek("persistent_subprocess = true\n[hooks]\ningest = \"i.py\"\n");
        assert_eq!((p.kind, p.agent), (Kind::Worker, false));
        let p = peek("component = \"c.wasm\"\n[hooks]\nruntime = \"wasm\"\n");
        assert_eq!(p.kind, Kind::Component);
        let p = peek("[hooks]\nruntime = \"wasm\"\ningest = \"i.wasm\"\n");
        assert_eq!(p.kind, Kind::CoreModules);
        assert!(peek("[hooks]\ntool_call_pre = \"g.sh\"\n").agent);
        assert!(peek("[hooks]\ntool_call_pr = \"g.sh\"\n").agent, "a misspelt agent hook");
        assert!(!peek("[hooks]\ningset = \"g.sh\"\n").agent, "a misspelt context hook");
        assert!(peek("[[tools]]\nname = \"t\"\n").agent);
    }
}
