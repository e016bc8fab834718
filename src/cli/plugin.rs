//! `ctxhost plugin` (in progress).

use clap::Args;

use super::CliResult;
use crate::home::Home;

/// (in progress)
#[derive(Debug, Args)]
pub struct PluginArgs {}

pub fn exec(_args: PluginArgs, _home: &Home) -> CliResult {
    Err("`ctxhost plugin` is not built yet".into())
}
