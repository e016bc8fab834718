//! What the host keeps for plugins, below the runners: today the state
//! store ([`store`]). It never runs plugin code.

pub mod store;
