//! Agent-loop hooks (`../shared/spec/agent-hooks.md`): message, tool-call,
//! memory and trigger interceptors that every plugin kind can take part in.
//!
//! - [`engine`]: the agent engine — chain order, the combine rules, tools,
//!   communicate, triggers through their chains.
//! - [`timers`]: its clock — due triggers, schedules, heartbeats.
//! - [`decision`]: how one plugin's answer is read and how answers combine
//!   (pure).
//!
//! The engine takes plugins already loaded (`app` discovers and loads them);
//! the services plugins call and the state they keep are `host`'s. Nothing
//! here knows how a plugin runs: calls go through `runner::Runner`.

pub mod decision;
pub mod engine;
pub mod timers;
