//! ctxhost: a plugin host for LLM-agent context engines.
//!
//! Start at [`protocol`] for the wire types, [`manifest`] for `plugin.toml`,
//! and [`runner`] for how a hook call executes. `ARCHITECTURE.md` is the map.

pub mod manifest;
pub mod protocol;

pub mod cli;
pub mod config;
pub mod doctor;
mod hint;
pub mod home;
pub mod plugin;
pub mod runner;
