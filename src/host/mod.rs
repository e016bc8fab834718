//! What the host keeps for plugins: the state store ([`store`]).
//!
//! Never runs a plugin.

pub mod store;
