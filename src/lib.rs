//! ctxhost: a plugin host for LLM-agent context engines.
//!
//! Start at [`protocol`] for the wire types, [`manifest`] for `plugin.toml`,
//! and [`runner`] for how a hook call executes. `ARCHITECTURE.md` is the map.
//!
//! # Example
//!
//! Load a script plugin and run its `ingest` hook, as `ctxhost hook` does:
//!
//! ```
//! use ctxhost::config::HostConfig;
//! use ctxhost::home::Home;
//! use ctxhost::plugin::{LoadContext, load_script_plugin};
//! use ctxhost::protocol::{HookRequest, IngestRequest, IngestReply};
//! use ctxhost::runner::{CallOptions, Runner};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let root = tempfile::tempdir()?;
//! let dir = root.path().join("echo");
//! std::fs::create_dir_all(dir.join("hooks"))?;
//! std::fs::write(dir.join("plugin.toml"), "name = \"echo\"\nversion = \"0.1.0\"\n\
//!     [hooks]\nruntime = \"bash\"\ningest = \"hooks/ingest.sh\"\n")?;
//! std::fs::write(dir.join("hooks/ingest.sh"),
//!     "echo \"{\\\"memories\\\":[{\\\"content\\\":\\\"you said: $LIBREFANG_MESSAGE\\\"}]}\"\n")?;
//!
//! let home = Home::at(root.path().join("home"));
//! let config = HostConfig::default();
//! let cx = LoadContext { home: &home, config: &config, host_env: &LoadContext::process_env };
//! let (runner, _warnings) = load_script_plugin(&dir, &cx)?;
//!
//! let request = HookRequest::Ingest(IngestRequest {
//!     agent_id: "agent-1".into(),
//!     message: "hello".into(),
//!     ..Default::default()
//! });
//! let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
//! let reply = rt.block_on(runner.call(&request, &CallOptions::default()))?;
//! let memories = IngestReply::from_value(&reply)?.memories;
//! assert_eq!(memories[0].content, "you said: hello");
//! # Ok(())
//! # }
//! ```

pub mod manifest;
pub mod protocol;

pub mod agent;
pub mod app;
pub mod cli;
pub mod config;
pub mod engine;
pub mod faust;
mod hint;
pub mod home;
pub mod host;
pub mod metrics;
pub mod plugin;
pub mod runner;
pub mod scaffold;
pub mod server;
pub mod session;
pub mod sidecar;
