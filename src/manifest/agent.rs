//! The agent-loop declarations of a manifest (`agent-hooks.md`, "Declaring
//! hooks, tools and schedules"): `priority`, `[[tools]]`, `[[schedules]]`,
//! `[agent_config]`, `prompt_suffix`, `[frontend]` and `heartbeat_secs`.
//! Components declare the same through their `describe-agent` reply, read
//! into the same [`AgentDecl`] by [`AgentDecl::from_json`].

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::{ManifestError, ManifestErrorKind};
use super::reader::Reader;
use super::schema::{Field, parse_schema};

/// The top-level keys this module reads.
pub const AGENT_KEYS: &[&str] =
    &["priority", "tools", "schedules", "agent_config", "prompt_suffix", "frontend", "heartbeat_secs"];

/// The longest schedule or heartbeat interval: a year.
pub const MAX_INTERVAL_SECS: f64 = 366.0 * 86_400.0;

/// A tool a plugin registers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the arguments.
    #[serde(default = "empty_object")]
    pub parameters: Value,
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

/// A host timer calling the plugin's `run_schedule` hook.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleSpec {
    pub id: String,
    /// Seconds between runs (`interval` is accepted too).
    #[serde(alias = "interval")]
    pub interval_secs: f64,
}

/// Frontend assets: files under the plugin's `frontend/`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Frontend {
    #[serde(default)]
    pub js: Vec<String>,
    #[serde(default)]
    pub css: Vec<String>,
}

/// What a plugin declares for the agent loop.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentDecl {
    /// As written; the order key is derived by the engine (plugin.toml:
    /// larger first, default 0).
    pub priority: Option<i64>,
    pub tools: Vec<ToolSpec>,
    pub schedules: Vec<ScheduleSpec>,
    pub config: Vec<Field>,
    pub prompt_suffix: Option<String>,
    pub frontend: Frontend,
    /// Seconds between `heartbeat` calls (default 10).
    pub heartbeat_secs: Option<f64>,
    /// Registrations refused at load (`{"kind","name","reason"}`): reported,
    /// never in effect.
    pub refused: Vec<Value>,
}

impl AgentDecl {
    pub(super) fn read(r: &mut Reader<'_>) -> Result<AgentDecl, ManifestError> {
        let priority = r.top("priority")?;
        let tools: Vec<ToolSpec> = r.top("tools")?.unwrap_or_default();
        let schedules: Vec<ScheduleSpec> = r.top("schedules")?.unwrap_or_default();
        let raw_config: Option<serde_json::Map<String, Value>> = r.top("agent_config")?;
        let config = match raw_config {
            Some(table) => parse_schema(&Value::Object(table))
                .map_err(|e| r.error("agent_config", ManifestErrorKind::Invalid(e.to_string())))?,
            None => Vec::new(),
        };
        let prompt_suffix = r.top("prompt_suffix")?;
        let frontend: Frontend = r.top("frontend")?.unwrap_or_default();
        let heartbeat_secs: Option<f64> = r.top("heartbeat_secs")?;
        let decl = AgentDecl {
            priority,
            tools,
            schedules,
            config,
            prompt_suffix,
            frontend,
            heartbeat_secs,
            refused: Vec::new(),
        };
        decl.check().map_err(|(key, reason)| r.error(&key, ManifestErrorKind::Invalid(reason)))?;
        Ok(decl)
    }

    /// A component's `describe-agent` JSON: `{"priority", "tools",
    /// "schedules", "config", "prompt_suffix", "frontend", "heartbeat_secs"}`,
    /// every key optional.
    ///
    /// # Errors
    /// A key of the wrong shape, named.
    pub fn from_json(value: &Value) -> Result<AgentDecl, String> {
        let get = |k: &str| value.get(k).cloned().unwrap_or(Value::Null);
        fn field<T: serde::de::DeserializeOwned + Default>(key: &str, v: Value) -> Result<T, String> {
            if v.is_null() { Ok(T::default()) } else { serde_json::from_value(v).map_err(|e| format!("`{key}`: {e}")) }
        }
        let decl = AgentDecl {
            priority: field("priority", get("priority"))?,
            tools: field("tools", get("tools"))?,
            schedules: field("schedules", get("schedules"))?,
            config: parse_schema(&get("config")).map_err(|e| format!("`config`: {e}"))?,
            prompt_suffix: field("prompt_suffix", get("prompt_suffix"))?,
            frontend: field("frontend", get("frontend"))?,
            heartbeat_secs: field("heartbeat_secs", get("heartbeat_secs"))?,
            refused: field("refused", get("refused"))?,
        };
        decl.check().map_err(|(key, reason)| format!("`{key}`: {reason}"))?;
        Ok(decl)
    }

    fn check(&self) -> Result<(), (String, String)> {
        let mut names = std::collections::BTreeSet::new();
        for (i, t) in self.tools.iter().enumerate() {
            if t.name.is_empty() {
                return Err((format!("tools[{i}].name"), "a tool needs a name".into()));
            }
            if !names.insert(t.name.as_str()) {
                return Err((format!("tools[{i}].name"), format!("tool `{}` is declared twice", t.name)));
            }
            if !t.parameters.is_object() {
                return Err((format!("tools[{i}].parameters"), "must be a JSON Schema object".into()));
            }
        }
        let mut ids = std::collections::BTreeSet::new();
        for (i, s) in self.schedules.iter().enumerate() {
            if !(s.interval_secs.is_finite() && s.interval_secs > 0.0 && s.interval_secs <= MAX_INTERVAL_SECS) {
                return Err((
                    format!("schedules[{i}].interval_secs"),
                    format!("must be a positive number of seconds, at most {MAX_INTERVAL_SECS} (a year)"),
                ));
            }
            if !ids.insert(s.id.as_str()) {
                return Err((format!("schedules[{i}].id"), format!("schedule `{}` is declared twice", s.id)));
            }
        }
        if let Some(h) = self.heartbeat_secs
            && !(h.is_finite() && h > 0.0 && h <= MAX_INTERVAL_SECS)
        {
            return Err((
                "heartbeat_secs".into(),
                format!("must be a positive number of seconds, at most {MAX_INTERVAL_SECS} (a year)"),
            ));
        }
        for (kind, files) in [("js", &self.frontend.js), ("css", &self.frontend.css)] {
            if let Some(bad) = files.iter().find(|f| f.split(['/', '\\']).any(|c| c == "..") || f.starts_with('/')) {
                return Err((format!("frontend.{kind}"), format!("`{bad}` must be a relative path under frontend/")));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_component_description_reads_like_the_manifest() {
        let d = AgentDecl::from_json(&json!({
            "priority": 5,
            "tools": [{"name": "t", "description": "d", "parameters": {"type": "object"}}],
            "schedules": [{"id": "s", "interval": 2}],
            "config": ["LIMIT:int:Limit=3"],
        }))
        .unwrap();
        assert_eq!(d.priority, Some(5));
        assert_eq!(d.tools[0].name, "t");
        assert_eq!(d.schedules[0].interval_secs, 2.0);
        assert_eq!(d.config[0].default, json!(3));
        let err = AgentDecl::from_json(&json!({"schedules": [{"id": "s", "interval_secs": 0}]})).unwrap_err();
        assert!(err.contains("schedules[0].interval_secs"), "{err}");
        let err = AgentDecl::from_json(&json!({"heartbeat_secs": 1e20})).unwrap_err();
        assert!(err.contains("heartbeat_secs") && err.contains("at most"), "{err}");
        let err = AgentDecl::from_json(&json!({"tools": [{"name": "t"}, {"name": "t"}]})).unwrap_err();
        assert!(err.contains("declared twice"), "{err}");
    }
}
