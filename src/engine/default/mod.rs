//! The built-in engine: what ctxhost does with no plugin, and what every
//! plugin falls back to. Memory in SQLite, assemble by token budget, compact
//! by summary.

pub mod assemble;
pub mod compact;
pub mod memory;
pub mod tokenizer;
