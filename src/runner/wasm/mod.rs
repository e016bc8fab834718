//! Component plugins (in progress, issue 4): the WIT world's host bindings.
//!
//! The runner itself — shared engine with fuel and epochs, `.cwasm` cache,
//! per-call stores with limits, capability-scoped WASI — builds on these.

pub mod bindings;
pub mod component;
mod convert;
pub mod core_module;
