//! The operator's records about installed plugins (in progress).

use crate::home::Home;

/// One plugin of the plugins dir as `ctxhost plugin list` and `GET /api/plugins` show it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PluginInfo {
    pub name: String,
    pub version: String,
    pub runtime: String,
    pub hooks: Vec<String>,
    pub enabled: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Whether the operator left `name` enabled (`ctxhost plugin disable` turns it off).
pub fn is_enabled(_home: &Home, _name: &str) -> bool {
    true
}

/// Every plugin directory of the plugins dir, read now (in progress).
pub fn list_plugins(_home: &Home, _config: &crate::config::HostConfig) -> Vec<PluginInfo> {
    Vec::new()
}
