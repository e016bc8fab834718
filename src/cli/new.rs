//! `ctxhost new` (in progress).

use clap::Args;

use super::CliResult;
use crate::home::Home;

/// (in progress)
#[derive(Debug, Args)]
pub struct NewArgs {}

pub fn exec(_args: NewArgs, _home: &Home) -> CliResult {
    Err("`ctxhost new` is not built yet".into())
}
