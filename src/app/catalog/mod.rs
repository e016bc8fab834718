//! The catalog: the one place that discovers a home's plugins (the plugins
//! dir, plus `[context_engine.hooks]` manual hooks), prepares them (a
//! FaustBot plugin's dependencies, through `faust::deps`), loads each
//! enabled plugin exactly once and keeps one status record per plugin.
//!
//! The context stack and the agent loop are views of it
//! ([`super::stack::build`], [`super::agent_loop::build`]): both take the
//! same [`LoadedPlugin`] — one runner, one worker pool, one compiled
//! component — and discover nothing themselves. A reload goes through the
//! same path ([`load_one`]). Every surface (`doctor`, `plugin list`,
//! `GET /api/plugins`, the agent-loop lists, reload, start) reads the status
//! records, so they cannot disagree: a plugin that would not run — a
//! manifest error, a missing launcher or `[[requires]]` binary, missing
//! dependencies, a FaustBot module that does not import ([`import_check`]),
//! a start that failed — is `error` in all of them.
//!
//! Never runs a hook: the only plugin code it may start is the confined,
//! short-lived import check of [`import_check`], and only when asked.

pub mod content;
pub mod fleet;
pub mod import_check;
mod status;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use arc_swap::ArcSwap;

pub(crate) use status::Peek;
pub use status::{ForkserverUse, Kind, PluginStatus, State};

use crate::app::registry;
use crate::faust::deps::Install;
use crate::host::LoadContext;
use crate::manifest::{MANIFEST_FILE, Manifest, Requirement, Runtime};
use crate::plugin::{LoadError, LoadedPlugin};
use crate::runner::process::{Launcher, find_on_path, runtime_info};

/// The name LibreFang's manual hooks (`[context_engine.hooks]`) go by.
pub const MANUAL_HOOKS: &str = "hooks";

/// What a catalog load does besides loading.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// The FaustBot dependency step: `None` skips it (a glance at a plugin
    /// that just appeared), [`Install::Never`] only checks.
    pub deps: Option<Install>,
    /// Import each FaustBot plugin's module in a confined, short-lived
    /// process ([`import_check`]): what `doctor` and `plugin list` do; a
    /// start learns the same from the plugin's `register`.
    pub import_check: bool,
    pub scope: Scope,
    /// What the load does with the store's record of each plugin's version.
    pub versions: fleet::Rule,
}

/// Which plugins a catalog load takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every plugin of the plugins dir.
    All,
    /// Only the context stack's (`ctxhost sidecar`, which has no agent loop).
    Stack,
}

impl Options {
    /// A start or reload (`serve`, `run`): dependencies installed when
    /// config.toml's `[faustbot] install_deps_at_start` says so, else checked.
    pub fn start(config: &crate::config::HostConfig) -> Options {
        Options {
            deps: Some(Install::at_start(config)),
            import_check: false,
            scope: Scope::All,
            versions: fleet::Rule::Record,
        }
    }

    /// [`Options::start`] for the context stack's plugins only.
    pub fn stack(config: &crate::config::HostConfig) -> Options {
        Options { scope: Scope::Stack, ..Options::start(config) }
    }

    /// A report (`doctor`, `plugin list`): everything checked, nothing installed.
    pub fn check() -> Options {
        Options { deps: Some(Install::Never), import_check: true, scope: Scope::All, versions: fleet::Rule::Look }
    }

    /// A quick look (`GET /api/plugins` at a plugin that appeared while the
    /// daemon runs): loaded, no python started.
    pub fn glance() -> Options {
        Options { deps: None, import_check: false, scope: Scope::All, versions: fleet::Rule::Look }
    }
}

/// One plugin of the catalog: its status and, when it runs, its one load.
#[derive(Clone)]
pub struct Entry {
    pub status: PluginStatus,
    /// The load both engines share: set exactly when `status.state` is `loaded`.
    pub plugin: Option<Arc<LoadedPlugin>>,
    /// A FaustBot plugin's dependencies are declared (requirements.txt or a
    /// readable `register_pip_deps`), once the dependency step ran.
    pub deps_declared: Option<bool>,
    /// It takes part in the agent loop (when loaded), or asks to (when not).
    pub agent_candidate: bool,
    /// Kept from running because its files are not the fleet's version
    /// ([`fleet`]): the calls it takes part in are refused, not served
    /// without it. Set only with `status.state` `error`.
    pub refused: Option<Arc<fleet::Refusal>>,
}

impl Entry {
    fn fail(&mut self, error: String) {
        self.status.fail(error);
        self.plugin = None;
    }

    fn refuse(&mut self, refusal: fleet::Refusal) {
        self.fail(refusal.to_string());
        self.refused = Some(Arc::new(refusal));
    }

    /// Whether it declares `hook` (what its manifest or component says).
    pub fn declares(&self, hook: crate::protocol::HookName) -> bool {
        self.status.hooks.iter().any(|h| h == hook.as_str())
    }
}

/// The plugins of a home, each loaded once, with one status each.
pub struct Catalog {
    /// By name; replaced whole on every change (reads never lock).
    entries: ArcSwap<BTreeMap<String, Entry>>,
    /// `[context_engine.hooks]`, when in force (no `plugin`/`plugin_stack`).
    manual: ArcSwap<Option<Entry>>,
    /// About the configuration rather than one plugin.
    notes: Vec<String>,
    /// The context stack config.toml names.
    stack: Vec<String>,
}

impl Catalog {
    /// Discovers, prepares and loads the plugins `options.scope` names,
    /// each enabled one exactly once, then (when asked) checks FaustBot
    /// imports. Never fails: a plugin that does not load is an entry in
    /// state `error`.
    pub fn load(cx: &LoadContext<'_>, options: &Options) -> Catalog {
        let engine_config = &cx.config.context_engine;
        let stack = engine_config.stack();
        let mut notes = Vec::new();
        let manual_hooks = engine_config.hooks.as_ref().filter(|h| !h.is_empty());
        if manual_hooks.is_some() && !stack.is_empty() {
            notes.push("[context_engine.hooks] is ignored: `plugin` or `plugin_stack` is set (as in LibreFang)".into());
        }
        let manual = manual_hooks.filter(|_| stack.is_empty()).map(|hooks| load_manual(hooks, cx));
        let names = match options.scope {
            Scope::All => registry::installed(cx.home),
            Scope::Stack => stack.clone(),
        };
        let mut entries: BTreeMap<String, Entry> =
            names.into_iter().map(|name| (name.clone(), load_one(&name, cx, options))).collect();
        if options.import_check {
            check_imports(&mut entries, cx);
        }
        // Where each would run: the engines built from this catalog say the
        // same (`Catalog::sync` makes it what they did).
        for (name, entry) in &mut entries {
            let running = entry.status.state == State::Loaded;
            entry.status.in_stack = running && stack.contains(name);
            entry.status.in_agent_loop = running && entry.agent_candidate;
        }
        let manual = manual.map(|mut m| {
            m.status.in_stack = m.status.state == State::Loaded;
            m
        });
        Catalog { entries: ArcSwap::from_pointee(entries), manual: ArcSwap::from_pointee(manual), notes, stack }
    }

    /// Every plugin of the plugins dir the catalog took, by name.
    pub fn entries(&self) -> Arc<BTreeMap<String, Entry>> {
        self.entries.load_full()
    }

    pub fn entry(&self, name: &str) -> Option<Entry> {
        self.entries.load().get(name).cloned()
    }

    /// `[context_engine.hooks]`, when in force.
    pub fn manual(&self) -> Option<Entry> {
        (**self.manual.load()).clone()
    }

    /// The status of every plugin of the plugins dir, by name.
    pub fn statuses(&self) -> Vec<PluginStatus> {
        self.entries.load().values().map(|e| e.status.clone()).collect()
    }

    /// [`Catalog::statuses`] plus the manual hooks (what `doctor` checks).
    pub fn all_statuses(&self) -> Vec<PluginStatus> {
        let mut all = self.statuses();
        all.extend(self.manual().map(|m| m.status));
        all
    }

    /// What the load had to say: about the configuration, and each
    /// plugin's load warnings (`plugin 'x': …`); a plugin in error that no
    /// engine would take is named here too, so no failure goes unsaid.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = self.notes.clone();
        for (name, entry) in self.entries.load().iter() {
            out.extend(entry.status.warnings.iter().map(|w| format!("plugin '{name}': {w}")));
            // The stack and the agent loop each say so for theirs.
            if let Some(error) = &entry.status.error
                && !entry.agent_candidate
                && !self.stack.contains(name)
            {
                out.push(format!("plugin '{name}' does not run: {error}"));
            }
        }
        if let Some(manual) = self.manual() {
            out.extend(manual.status.warnings.iter().map(|w| format!("plugin '{MANUAL_HOOKS}': {w}")));
        }
        out
    }

    /// The statuses of the plugins dir as it is now, for a daemon: a plugin
    /// the catalog holds as it holds it (what runs; `enabled` read now), one
    /// that appeared since loaded at a glance (and said so).
    pub fn current(&self, cx: &LoadContext<'_>) -> Vec<PluginStatus> {
        let entries = self.entries.load();
        registry::installed(cx.home)
            .into_iter()
            .map(|name| match entries.get(&name) {
                Some(entry) => {
                    let mut status = entry.status.clone();
                    status.enabled = registry::is_enabled(cx.home, &name);
                    status
                }
                None => {
                    let mut status = load_one(&name, cx, &Options::glance()).status;
                    if status.state == State::Loaded {
                        status.warnings.push(format!(
                            "not loaded by this daemon (it appeared after the start): \
                             `POST /api/plugins/{name}/reload` loads it"
                        ));
                    }
                    status
                }
            })
            .collect()
    }

    /// Puts `entry` (a fresh [`load_one`]) in place of plugin `name`'s.
    pub fn put(&self, name: &str, entry: Entry) {
        self.entries.rcu(|old| {
            let mut map = (**old).clone();
            map.insert(name.to_owned(), entry.clone());
            map
        });
    }

    /// A reload of `name` that did not happen (`fresh` is what it loaded,
    /// `error` why it was refused): the running version stays and its
    /// status says so; a plugin that was not running takes the new error.
    pub fn reload_failed(&self, name: &str, fresh: &Entry, error: &str) {
        self.entries.rcu(|old| {
            let mut map = (**old).clone();
            match map.get_mut(name) {
                Some(entry) if entry.status.state == State::Loaded => {
                    entry.status.warnings.retain(|w| !w.starts_with(RELOAD_FAILED));
                    entry.status.warnings.push(format!("{RELOAD_FAILED}{error}; the running version stays"));
                }
                _ => {
                    let mut entry = fresh.clone();
                    if entry.status.state != State::Error {
                        entry.fail(error.to_owned());
                    }
                    map.insert(name.to_owned(), entry);
                }
            }
            map
        });
    }

    /// Makes the statuses what the engines did: which plugins are stack
    /// layers and agent-loop members, and which failed to start (`register`)
    /// — those become `error` with the engine's reason.
    pub fn sync(&self, stack: &crate::engine::stack::StackEngine, agent: &crate::agent::engine::AgentEngine) {
        let failed = agent.failed();
        self.entries.rcu(|old| {
            let mut map = (**old).clone();
            for (name, entry) in &mut map {
                if let Some(error) = failed.get(name)
                    && entry.status.state == State::Loaded
                {
                    entry.fail(format!("failed to start: {error}"));
                }
                entry.status.in_stack = stack.layer(name).is_some();
                entry.status.in_agent_loop = agent.plugin(name).is_some();
            }
            map
        });
        self.manual.rcu(|old| {
            let mut manual = (**old).clone();
            if let Some(m) = &mut manual {
                m.status.in_stack = stack.layer(MANUAL_HOOKS).is_some();
            }
            manual
        });
    }

    /// The plugins refused on this instance (their files are not the
    /// fleet's version), by name.
    pub fn refused(&self) -> Vec<Arc<fleet::Refusal>> {
        self.entries.load().values().filter_map(|e| e.refused.clone()).collect()
    }

    /// The first refused plugin that would take part in a call of `hook`:
    /// it declares the hook and `takes_part(name, entry)` (in the stack, in
    /// the agent loop). Such a call must be refused rather than served
    /// without it.
    pub fn refusing(
        &self,
        hook: crate::protocol::HookName,
        takes_part: impl Fn(&str, &Entry) -> bool,
    ) -> Option<Arc<fleet::Refusal>> {
        self.entries
            .load()
            .iter()
            .find(|(name, e)| e.refused.is_some() && e.declares(hook) && takes_part(name, e))
            .and_then(|(_, e)| e.refused.clone())
    }

    /// A plugin of `engine`'s stack that declares `hook` and is refused here
    /// (the agent API's and the sidecar's check before each call). The
    /// stack's names are only read when some refused plugin declares `hook`:
    /// nothing is allocated on the call path while every plugin runs.
    pub fn refusing_in_stack(
        &self,
        engine: &crate::engine::stack::StackEngine,
        hook: crate::protocol::HookName,
    ) -> Option<Arc<fleet::Refusal>> {
        let names = std::cell::OnceCell::new();
        self.refusing(hook, |name, _| names.get_or_init(|| engine.configured_names()).iter().any(|n| n == name))
    }

    /// Marks plugin `name` as not running for `error` (the agent loop could
    /// not open its host services).
    pub(crate) fn fail(&self, name: &str, error: &str) {
        self.entries.rcu(|old| {
            let mut map = (**old).clone();
            if let Some(entry) = map.get_mut(name) {
                entry.fail(error.to_owned());
            }
            map
        });
    }
}

const RELOAD_FAILED: &str = "a reload failed: ";

/// What [`adopt`] recorded.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Adopted {
    pub name: String,
    pub content_hash: String,
    pub version: String,
    /// The store is shared with other homes (else the record only follows this one's files).
    pub shared: bool,
    /// The hash recorded before, if another.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replaced: Option<String>,
}

/// Records the files of plugin `name` in this home as the version every
/// instance on the store runs ([`fleet::Rule::Adopt`]): the operator's
/// deliberate step after deploying new files (`ctxhost plugin adopt`, and
/// `plugin install`). On a store with a change feed, an `adopt` entry
/// tells the running instances, which re-hash their own files and refuse
/// the plugin or resume it.
///
/// # Errors
/// No such plugin, its files cannot be hashed, or the store fails.
pub fn adopt(cx: &LoadContext<'_>, name: &str) -> Result<Adopted, registry::RegistryError> {
    let dir = registry::plugin_dir(cx.home, name)?;
    let content_hash = content::content_hash(&dir)
        .map_err(|source| registry::RegistryError::Content { name: name.to_owned(), source })?;
    let version = Peek::read(&dir).version;
    let store = crate::host::store::open(cx.home)?;
    let before = store.plugin_version(name)?;
    store.record_plugin_version(&fleet::record(cx, name, &content_hash, &version), true)?;
    if let Some(feed) = crate::host::store::open_feed(cx.home)? {
        let payload = serde_json::json!({"hash": content_hash, "version": version});
        feed.note(crate::host::store::feed::ChangeKind::Adopt, name, &payload)?;
    }
    Ok(Adopted {
        name: name.to_owned(),
        shared: store.shared(),
        replaced: before.map(|b| b.hash).filter(|h| *h != content_hash),
        content_hash,
        version,
    })
}

/// The one path from a plugin's name to its entry: discover (a plugin dir
/// of either kind), enabled?, prepare (FaustBot dependencies), load
/// (`plugin::load_plugin`'s loaders), check (launcher, `[[requires]]`).
/// Start, reload and the reports all come here.
pub fn load_one(name: &str, cx: &LoadContext<'_>, options: &Options) -> Entry {
    let dir = cx.home.plugins_dir().join(name);
    let enabled = registry::is_enabled(cx.home, name);
    let peek = Peek::read(&dir);
    let mut entry = Entry {
        status: PluginStatus::from_peek(name, &peek, enabled),
        plugin: None,
        deps_declared: None,
        agent_candidate: peek.agent,
        refused: None,
    };
    // Until a load tells exactly (a venv's python, a `[env] PATH`): the
    // runtime's launcher on the host's PATH.
    entry.status.runtime_available = peek.runtime.as_ref().is_some_and(|r| runtime_found(r, &dir, cx));
    if let Err(e) = crate::manifest::validate_name(name) {
        entry.fail(e);
        return entry;
    }
    if !crate::faust::is_plugin_dir(&dir) {
        entry.fail(format!("`{}` has no {MANIFEST_FILE} or {}", dir.display(), crate::faust::PLUGIN_JSON));
        return entry;
    }
    let hash = content::content_hash(&dir);
    entry.status.content_hash = hash.as_ref().ok().cloned();
    if !enabled {
        describe_disabled(&dir, cx, &mut entry.status);
        return entry;
    }
    let faust = peek.kind == Kind::Faustbot;
    if faust && let Some(install) = options.deps {
        // Dependencies go in before the module is first imported.
        match crate::faust::deps::prepare(&dir, cx, install) {
            Ok(prepared) => entry.deps_declared = Some(prepared.declared),
            Err(e) => {
                entry.fail(format!("its dependencies: {e}"));
                return entry;
            }
        }
    }
    let (plugin, script) = match load(&dir, &peek, cx) {
        Ok(loaded) => loaded,
        Err(e) => {
            entry.fail(e.to_string());
            return entry;
        }
    };
    let status = &mut entry.status;
    status.version = plugin.version.clone();
    status.runtime = plugin.settings.runtime.label();
    status.hooks = plugin.hooks.iter().map(|h| h.as_str().to_owned()).collect();
    status.warnings = plugin.warnings.clone();
    status.kind = kind_of(&plugin, &peek);
    if status.kind != Kind::Faustbot {
        status.forkserver =
            crate::runner::process::forkserver_decision(&plugin.settings, cx.config).map(ForkserverUse::of);
    }
    status.install_hint = runtime_info(&plugin.settings.runtime).install_hint.to_owned();
    entry.agent_candidate = crate::agent::engine::AgentPlugin::takes_part(&plugin);
    let ready = plugin.runner.ready();
    status.runtime_available = match &script {
        Some(s) => !s.launcher_missing,
        None if plugin.settings.runtime == Runtime::Wasm => true,
        // A FaustBot plugin: its entry exists (the manifest checked), so
        // only the python can be missing.
        None => ready.is_ok(),
    };
    let path = (cx.host_env)("PATH");
    for req in script.iter().flat_map(|s| &s.requires) {
        if find_on_path(&req.binary, path.as_deref()).is_none() {
            status.missing_binaries.push(req.binary.clone());
            if let Some(hint) = &req.install_hint {
                status.install_hint.push_str(&format!("; {}: {hint}", req.binary));
            }
        }
    }
    if let Err(e) = ready {
        let launcher_only = !status.runtime_available;
        entry.fail(format!("cannot run: {e}"));
        // LibreFang's doctor: the hooks are fine, the runtime is missing.
        entry.status.hooks_valid = launcher_only;
    } else if !status.missing_binaries.is_empty() {
        let names: Vec<String> = status.missing_binaries.iter().map(|b| format!("`{b}`")).collect();
        let error = format!("cannot run: it needs {} not found on PATH", names.join(", "));
        entry.fail(error);
    } else {
        match one_version(name, &hash, &plugin.version, cx, options.versions) {
            Ok(warning) => {
                entry.status.warnings.extend(warning);
                entry.plugin = Some(Arc::new(plugin));
            }
            Err(refusal) => entry.refuse(refusal),
        }
    }
    entry
}

/// Whether plugin `name`, whose files hash to `hash`, may run here: the
/// store's record of its version ([`fleet`]). A hash that cannot be computed
/// refuses the plugin on a shared store (its version cannot be told) and is
/// a warning on a home's own one.
fn one_version(
    name: &str,
    hash: &Result<String, content::ContentError>,
    version: &str,
    cx: &LoadContext<'_>,
    rule: fleet::Rule,
) -> Result<Option<String>, fleet::Refusal> {
    match hash {
        Ok(hash) => fleet::check(cx, name, hash, version, rule).map(|()| None),
        Err(e) if matches!(crate::host::store::store_url(cx.home), Ok(Some(_))) => Err(fleet::Refusal::unknown(
            name,
            None,
            version,
            format!("its version cannot be told, so it cannot be compared with the other instances': {e}"),
        )),
        Err(e) => Ok(Some(format!("its content hash cannot be computed: {e}"))),
    }
}

/// What a script plugin's load tells beyond [`LoadedPlugin`].
struct ScriptFacts {
    launcher_missing: bool,
    requires: Vec<Requirement>,
}

/// Loads the plugin in `dir` once, with the loader its manifest asks for
/// (the loaders of `plugin::load_plugin`; a script through
/// `load_script_plugin` so its launcher can be told).
fn load(dir: &Path, peek: &Peek, cx: &LoadContext<'_>) -> Result<(LoadedPlugin, Option<ScriptFacts>), LoadError> {
    if peek.kind == Kind::Faustbot || matches!(peek.runtime, None | Some(Runtime::Wasm)) {
        return crate::plugin::load_plugin(dir, cx).map(|p| (p, None));
    }
    match crate::plugin::load_script_plugin(dir, cx) {
        Ok((runner, warnings)) => {
            let plugin = runner.plugin();
            let facts = ScriptFacts {
                launcher_missing: matches!(plugin.launcher, Launcher::Missing { .. }),
                requires: plugin.manifest.requires.clone(),
            };
            Ok((LoadedPlugin::script(runner, warnings), Some(facts)))
        }
        // The lenient read took it for a script; the manifest says wasm.
        Err(LoadError::NotAScript(_)) => crate::plugin::load_plugin(dir, cx).map(|p| (p, None)),
        Err(e) => Err(e),
    }
}

/// `[context_engine.hooks]` as the entry named [`MANUAL_HOOKS`].
fn load_manual(hooks: &toml::Table, cx: &LoadContext<'_>) -> Entry {
    let peek = Peek {
        version: "0.0.0".into(),
        runtime: None,
        runtime_label: "unknown".into(),
        kind: Kind::Script,
        agent: false,
    };
    let mut entry = Entry {
        status: PluginStatus::from_peek(MANUAL_HOOKS, &peek, true),
        plugin: None,
        deps_declared: None,
        agent_candidate: false,
        refused: None,
    };
    match crate::plugin::load_manual_hooks(hooks, cx) {
        Ok((runner, warnings)) => {
            let launcher_missing = matches!(runner.plugin().launcher, Launcher::Missing { .. });
            let plugin = LoadedPlugin::script(runner, warnings);
            let status = &mut entry.status;
            status.runtime = plugin.settings.runtime.label();
            status.hooks = plugin.hooks.iter().map(|h| h.as_str().to_owned()).collect();
            status.warnings = plugin.warnings.clone();
            status.kind = kind_of(&plugin, &peek);
            status.forkserver =
                crate::runner::process::forkserver_decision(&plugin.settings, cx.config).map(ForkserverUse::of);
            status.install_hint = runtime_info(&plugin.settings.runtime).install_hint.to_owned();
            status.runtime_available = !launcher_missing;
            match plugin.runner.ready() {
                Ok(()) => entry.plugin = Some(Arc::new(plugin)),
                Err(e) => {
                    entry.fail(format!("cannot run: {e}"));
                    entry.status.hooks_valid = launcher_missing;
                }
            }
        }
        Err(e) => entry.fail(e.to_string()),
    }
    entry
}

/// Whether `runtime`'s launcher is there, as far as the host's PATH tells
/// (a custom launcher: its file, relative to the plugin dir).
fn runtime_found(runtime: &Runtime, dir: &Path, cx: &LoadContext<'_>) -> bool {
    let info = runtime_info(runtime);
    match runtime {
        Runtime::Custom(given) => {
            let relative: std::path::PathBuf =
                given.components().filter(|c| *c != std::path::Component::CurDir).collect();
            crate::runner::process::launcher::is_executable(&dir.join(relative))
        }
        _ if info.programs.is_empty() => true,
        _ => {
            let path = (cx.host_env)("PATH");
            info.programs.iter().any(|p| find_on_path(p, path.as_deref()).is_some())
        }
    }
}

/// A loaded plugin's kind: FaustBot, a component or core modules (as its
/// manifest says), else by its worker settings.
fn kind_of(plugin: &LoadedPlugin, peek: &Peek) -> Kind {
    let s = &plugin.settings;
    if plugin.faust.is_some() {
        Kind::Faustbot
    } else if s.runtime == Runtime::Wasm {
        if peek.kind == Kind::CoreModules { Kind::CoreModules } else { Kind::Component }
    } else if s.persistent_subprocess && s.worker_protocol == crate::manifest::WorkerProtocol::Jsonrpc {
        Kind::JsonrpcWorker
    } else if s.persistent_subprocess {
        Kind::Worker
    } else {
        Kind::Script
    }
}

/// A disabled plugin is not loaded: what its manifest says, read without
/// side effects (no grant recorded, nothing written). A manifest that does
/// not read is a warning — the plugin is off either way.
fn describe_disabled(dir: &Path, cx: &LoadContext<'_>, status: &mut PluginStatus) {
    if crate::faust::is_faust_plugin(dir) {
        if let Err(e) = crate::faust::PluginJson::load(dir) {
            status.warnings.push(format!("it would not load: {e}"));
        }
        return;
    }
    let lookup = |var: &str| (cx.host_env)(var).map(|v| v.to_string_lossy().into_owned());
    match Manifest::load_with_env(dir, &lookup) {
        Ok(loaded) => {
            status.version = loaded.manifest.version.clone();
            status.runtime = loaded.manifest.settings.runtime.label();
            status.hooks = loaded.manifest.hooks.keys().map(|h| h.as_str().to_owned()).collect();
            status.warnings = loaded.warnings;
        }
        Err(e) => status.warnings.push(format!("it would not load: {e}")),
    }
}

/// Imports every loaded FaustBot plugin's module in its own confined,
/// short-lived process, all at once on a runtime of their own (so this
/// works with or without one around); a module that does not import puts
/// its plugin in `error` with the traceback's last line.
fn check_imports(entries: &mut BTreeMap<String, Entry>, cx: &LoadContext<'_>) {
    let mut runners = Vec::new();
    for (name, entry) in entries.iter_mut() {
        if entry.status.state != State::Loaded || entry.status.kind != Kind::Faustbot {
            continue;
        }
        match import_check::importer(&cx.home.plugins_dir().join(name), cx) {
            Ok(runner) => runners.push((name.clone(), runner)),
            Err(e) => entry.fail(format!("the import check could not start: {e}")),
        }
    }
    if runners.is_empty() {
        return;
    }
    let outcomes = std::thread::scope(|s| {
        s.spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
            Some(rt.block_on(async {
                let mut tasks = tokio::task::JoinSet::new();
                for (name, runner) in runners {
                    tasks.spawn(async move { (name, import_check::check(&runner).await) });
                }
                let mut outcomes = Vec::new();
                while let Some(done) = tasks.join_next().await {
                    outcomes.extend(done.ok());
                }
                outcomes
            }))
        })
        .join()
        .ok()
        .flatten()
    });
    let Some(outcomes) = outcomes else {
        tracing::warn!("the FaustBot import checks could not run (no runtime)");
        return;
    };
    for (name, outcome) in outcomes {
        let Some(entry) = entries.get_mut(&name) else { continue };
        match outcome {
            import_check::Outcome::Imports => {}
            import_check::Outcome::Unknown(w) => entry.status.warnings.push(w),
            import_check::Outcome::Fails { line, import_error } => {
                let hint = if import_error && entry.deps_declared == Some(false) {
                    "; its dependencies could not be read without running it: list them in a requirements.txt \
                     beside plugin.json"
                } else {
                    ""
                };
                entry.fail(format!("its module does not import: {line}{hint}"));
            }
        }
    }
}
