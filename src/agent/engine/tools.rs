//! Tools plugins register: the list, and a call wrapped by `tool_call_pre`
//! (which may deny it) and `tool_call_post` (which may rewrite the result),
//! routed to the plugin that registered the tool.

use serde_json::{Value, json};

use super::*;

impl AgentEngine {
    /// Every registered tool: `(plugin, spec)`, in plugin order. A name two
    /// plugins register belongs to the first in chain order (the other one
    /// is warned about when it joins).
    pub fn tools(&self) -> Vec<(String, ToolSpec)> {
        let mut seen = BTreeSet::new();
        self.plugins
            .load()
            .iter()
            .flat_map(|p| p.decl.tools.iter().map(|t| (p.name.clone(), t.clone())))
            .filter(|(_, t)| seen.insert(t.name.clone()))
            .collect()
    }

    /// Calls registered tool `name`: `tool_call_pre` (which may deny it or
    /// rewrite the args), the owner's `call_tool`, then `tool_call_post`.
    ///
    /// # Errors
    /// No such tool, or its plugin has no `call_tool` hook.
    pub async fn call_tool(&self, agent_id: &str, name: &str, args: Value) -> Result<ToolOutcome, AgentError> {
        let owner = self.plugins.load().iter().find(|p| p.decl.tools.iter().any(|t| t.name == name)).cloned();
        let Some(owner) = owner else {
            let tools = self.tools();
            return Err(AgentError::UnknownTool {
                name: name.to_owned(),
                hint: crate::hint::did_you_mean(name, tools.iter().map(|(_, t)| t.name.as_str())),
            });
        };
        if !owner.hooks.contains(&HookName::CallTool) {
            return Err(AgentError::NoHook { plugin: owner.name.clone(), hook: HookName::CallTool });
        }
        let args = match self.tool_call_pre(agent_id, name, args).await {
            Ok(args) => args,
            Err(blocked) => return Ok(ToolOutcome::Blocked(blocked)),
        };
        let fields = obj(json!({"agent_id": agent_id, "name": name, "args": args.clone()}));
        let (result, is_error) = match self.call(&owner, HookName::CallTool, fields).await {
            Ok(Value::Object(reply)) => match (reply.get("error"), reply.get("result")) {
                (Some(Value::String(e)), _) => (Value::String(e.clone()), true),
                (Some(e), _) if !e.is_null() => (Value::String(e.to_string()), true),
                (_, Some(r)) => (r.clone(), false),
                _ => (Value::Null, false),
            },
            Ok(other) => (other, false),
            Err(e) => (Value::String(format!("tool `{name}` failed: {e}")), true),
        };
        let result = self.tool_call_post(agent_id, name, &args, result, is_error).await;
        Ok(ToolOutcome::Result { result, is_error })
    }
}
