//! Column encodings both store backends share: seconds and counts between
//! unsigned host values and signed SQL integers, JSON values as text, the
//! range of paths below a vfs directory, and a storage scope's columns. No
//! SQL and no connection here; a backend passes its name for errors.

use serde_json::Value;

use super::{Scope, StoreError, StoreErrorKind};

pub(super) fn secs(s: u64) -> i64 {
    i64::try_from(s).unwrap_or(i64::MAX)
}

pub(super) fn unsecs(s: i64) -> u64 {
    u64::try_from(s).unwrap_or(0)
}

pub(super) fn count(n: i64) -> usize {
    usize::try_from(n).unwrap_or(0)
}

/// `value` as the text a JSON column holds.
pub(super) fn json_text(backend: &'static str, op: &'static str, value: &Value) -> Result<String, StoreError> {
    serde_json::to_string(value)
        .map_err(|e| StoreError::new(backend, op, StoreErrorKind::Backend(format!("cannot serialise a value: {e}"))))
}

/// A JSON column's text read back; `what` names the record when it is corrupt.
pub(super) fn parse_json<T: serde::de::DeserializeOwned>(
    backend: &'static str,
    op: &'static str,
    what: String,
    text: &str,
) -> Result<T, StoreError> {
    serde_json::from_str(text)
        .map_err(|e| StoreError::new(backend, op, StoreErrorKind::Corrupt { what, reason: e.to_string() }))
}

/// The exclusive upper bound of the paths below `prefix` (which ends in `/`):
/// `/` is followed by `0` in byte order (both backends compare bytes).
pub(super) fn below_end(prefix: &str) -> String {
    let mut end = prefix.trim_end_matches('/').to_owned();
    end.push('0');
    end
}

/// `(scope, agent)` columns of a scope.
pub(super) fn scope_cols(scope: Scope<'_>) -> (&'static str, &str) {
    match scope {
        Scope::Global => ("global", ""),
        Scope::Session(agent) => ("session", agent),
    }
}
