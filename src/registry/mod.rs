//! The operator's records about installed plugins (in progress).

use crate::home::Home;

/// Whether the operator left `name` enabled (`ctxhost plugin disable` turns it off).
pub fn is_enabled(_home: &Home, _name: &str) -> bool {
    true
}
