//! ctxhost: a plugin host for LLM-agent context engines.
//!
//! Start at [`protocol`] for the wire types, [`manifest`] for `plugin.toml`,
//! and [`runner`] for how a hook call executes. `ARCHITECTURE.md` is the map.

pub mod protocol;
pub mod manifest;

mod hint;
pub mod config;
pub mod home;
pub mod runner;
pub mod plugin;
pub mod doctor;
pub mod cli;
