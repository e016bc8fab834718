//! The host's state store in `<home>/state.db`: today the after_turn
//! [`journal`].

pub mod journal;
