//! Agent-loop hooks (`../shared/spec/agent-hooks.md`): message, tool-call,
//! memory and trigger interceptors that every plugin kind can take part in.
//!
//! Being built (issue 7). So far: [`decision`], how one plugin's answer is
//! read and how the answers of several plugins combine; [`config`], the
//! typed per-plugin config service (one `PluginConfig` per plugin, behind
//! the caller's lock when agents share it); [`vfs`], the virtual file store
//! (one `Vfs`, likewise behind a lock); [`triggers`], the trigger store and
//! what is due when; [`storage`], per-plugin key-value storage in global and
//! per-agent scopes. Nothing calls plugins through these yet.

pub mod config;
pub mod decision;
pub mod storage;
pub mod triggers;
pub mod vfs;
