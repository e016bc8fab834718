//! The context engine: built-in defaults now, plugins and stacks on top.

pub mod default;
