//! Why a wasm call failed, in terms a user can act on: out of fuel, past the
//! deadline, over the memory limit, a guest panic (told by the last lines of
//! its stderr), or another trap by its own name.
//!
//! Owns classifying a wasmtime error after a call, for components and core
//! modules alike: each becomes the [`HookError`] of its kind. Never runs guest
//! code and never puts more of a guest's output in an error than
//! [`STDERR_IN_ERROR`].

use wasmtime::Trap;

use crate::runner::HookError;

/// The most of a guest's stderr an error carries: its last lines, where a
/// panic's cause is.
const STDERR_IN_ERROR: usize = 1024;

/// The end of `text`, at most `max` bytes (cut at a char boundary, `…` first
/// when cut).
fn tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &text[start..])
}

/// What a panic said: the lines from the last `panicked at` on (a guest may
/// print anything before it), without the backtrace hint, on one line and
/// bounded by [`STDERR_IN_ERROR`] (keeping the end, the cause).
fn panic_text(stderr: &str) -> Option<String> {
    let lines: Vec<&str> = stderr.lines().collect();
    let start = lines.iter().rposition(|l| l.contains(" panicked at "))?;
    let said = lines[start..].iter().filter(|l| !l.starts_with("note:")).copied().collect::<Vec<_>>().join(" ");
    Some(tail(&said, STDERR_IN_ERROR))
}

/// What a failed wasm call was, typed: out of fuel, past the deadline, over
/// the memory limit, a guest panic (when `guest_stderr` tells one), or
/// another trap by its own name with the end of `guest_stderr`.
pub(super) fn classify(
    e: &wasmtime::Error,
    fuel_used: u64,
    timeout_ms: u64,
    memory_mb: u64,
    guest_stderr: &str,
) -> HookError {
    let guest_said = guest_stderr.trim();
    match e.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel) => HookError::OutOfFuel { used: fuel_used },
        Some(Trap::Interrupt) => HookError::Deadline { ms: timeout_ms },
        Some(Trap::StackOverflow) => HookError::Trap("stack overflow (too deep a recursion)".to_owned()),
        // Rust guests keep their stack in linear memory: running off its end
        // is an out-of-bounds access, not a wasm stack overflow.
        Some(Trap::MemoryOutOfBounds) => HookError::Trap(
            "out-of-bounds memory access (in a Rust guest usually a stack overflow from too deep a recursion)"
                .to_owned(),
        ),
        Some(Trap::UnreachableCodeReached) if let Some(message) = panic_text(guest_said) => {
            HookError::GuestPanic { message }
        }
        _ if format!("{e:#}").contains("memory") && format!("{e:#}").contains("grow") => {
            HookError::MemoryLimit { mb: memory_mb }
        }
        trap => {
            // A trap's own name, not the wasm backtrace around it.
            let base = trap.map_or_else(|| format!("{e:#}"), |t| format!("trap: {t}"));
            HookError::Trap(if guest_said.is_empty() {
                base
            } else {
                format!("{base}; guest stderr: {}", tail(guest_said, STDERR_IN_ERROR))
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_is_told_by_its_last_lines_within_the_bound() {
        let noise = "noise\n".repeat(500);
        let stderr = format!("{noise}thread '<unnamed>' panicked at src/lib.rs:1:1:\nthe cause\nnote: run with …");
        assert_eq!(panic_text(&stderr).unwrap(), "thread '<unnamed>' panicked at src/lib.rs:1:1: the cause");
        let long = format!("x panicked at y:\n{}é the end", "é".repeat(2000));
        let told = panic_text(&long).unwrap();
        assert!(told.len() <= STDERR_IN_ERROR + "…".len() && told.ends_with("é the end"), "{told}");
        assert_eq!(panic_text("no panic here"), None);
    }
}
