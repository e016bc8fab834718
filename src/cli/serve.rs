//! `ctxhost serve` (in progress).

use clap::Args;

use super::CliResult;
use crate::home::Home;

/// (in progress)
#[derive(Debug, Args)]
pub struct ServeArgs {}

pub fn exec(_args: ServeArgs, _home: &Home) -> CliResult {
    Err("`ctxhost serve` is not built yet".into())
}
