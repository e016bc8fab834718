//! The environment plan and launcher a script plugin's manifest comes to on
//! this host: what a load fixes once ([`env_plan`]) and the launcher hooks
//! run on without a virtual environment ([`system_launcher`]; installers and
//! the FaustBot dependency step build environments with it). Never spawns.

use std::path::Path;

use super::{EnvInputs, EnvPlan, Launcher};
use crate::host::LoadContext;
use crate::manifest::Manifest;

/// The hook environment of `manifest`'s plugin, in spec order.
pub fn env_plan(
    manifest: &Manifest,
    cx: &LoadContext<'_>,
    config_file: Option<&Path>,
    venv: Option<&Path>,
    cache_dir: Option<&Path>,
) -> EnvPlan {
    let home = cx.hook_home();
    EnvPlan::new(EnvInputs {
        manifest,
        passthrough: super::runtime_info(&manifest.settings.runtime).passthrough,
        allowed_env_vars: &cx.config.allowed_env_vars,
        config_file,
        venv,
        cache_dir,
        home: Some(&home),
        host: cx.host_env,
    })
}

/// The launcher a script plugin's hooks would run on without a virtual
/// environment — resolved exactly as a load resolves it (PATH as the hook
/// sees it, version-manager shims seen through). `ctxhost plugin install`
/// builds a python plugin's environment with it.
pub fn system_launcher(manifest: &Manifest, cx: &LoadContext<'_>) -> Launcher {
    let env = env_plan(manifest, cx, None, None, None);
    let user_home = cx.user_home();
    super::resolve_launcher(
        &manifest.settings.runtime,
        &manifest.dir,
        env.base(),
        user_home.as_deref(),
        &cx.home.cache_dir(),
    )
}
