//! The application layer: the plugins of a home as one catalog — which are
//! installed, enabled, granted what, loaded once, with one status each —
//! and the operations on them that every front end (CLI, HTTP server,
//! sidecar) shares: the catalog and its two views, the context stack and
//! the agent loop ([`catalog`], [`stack`], [`agent_loop`]), installing and
//! removing ([`install`]), the operator's records ([`registry`]), and the
//! health check ([`doctor`]).
//!
//! Front ends call this layer; it never parses a request or prints.

pub mod agent_loop;
pub mod catalog;
pub mod doctor;
pub mod follow;
pub mod grant;
pub mod install;
pub mod registry;
pub mod stack;

pub use agent_loop::load_agent;
pub use catalog::Catalog;
pub use stack::load_stack;
