//! `ctxhost sidecar` (in progress).

use clap::Args;

use super::CliResult;
use crate::home::Home;

/// (in progress)
#[derive(Debug, Args)]
pub struct SidecarArgs {}

pub fn exec(_args: SidecarArgs, _home: &Home) -> CliResult {
    Err("`ctxhost sidecar` is not built yet".into())
}
