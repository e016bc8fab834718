//! The application layer: the plugins of a home as one catalog — which are
//! installed, enabled, granted what — and the operations on them that
//! every front end (CLI, HTTP server, sidecar) shares: installing and
//! removing ([`install`]), listing ([`registry`]), loading the stack and
//! the agent loop, and the health check ([`doctor`]).
//!
//! Front ends call this layer; it never parses a request or prints.

pub mod agent_loop;
pub mod doctor;
pub mod install;
pub mod registry;
pub mod stack;

pub use agent_loop::load_agent;
pub use stack::load_stack;
