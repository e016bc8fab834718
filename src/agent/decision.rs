//! What one plugin answered at an agent-loop hook, and how the answers of
//! several plugins combine (`../shared/spec/agent-hooks.md`, "Hooks and how
//! results combine").
//!
//! A reply is a [`Decision`]: pass, replace the value, or block. Plugins run
//! in [`order`], each seeing the value the previous one left; a block stops
//! the chain. Each plugin is isolated: its failure is reported and counts as
//! a pass — one broken plugin never costs the others their say (FaustBot's
//! pluggy loses every plugin's result when one raises).
//!
//! This module is pure: it never runs a plugin; [`chain`] takes the call as
//! a closure.

use std::future::Future;

use serde_json::Value;

/// FaustBot's message-hook sentinel for "drop this".
pub const IGNORED: &str = "__IGNORED__";

/// One plugin's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// No opinion: the value goes on unchanged.
    Pass,
    /// Go on with this value instead.
    Replace(Value),
    /// Stop: the message is dropped, the tool call denied, the write refused…
    Block { reason: String },
}

/// A reply that is not a decision.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("not a decision: {0}")]
pub struct BadDecision(String);

/// How a hook's replies are read: the message hooks also take FaustBot's
/// string forms (a bare string replaces, `"__IGNORED__"` blocks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    Strict,
    StringsReplaceOrBlock,
}

impl Decision {
    /// Reads a plugin's reply. `null` and `{}` are a pass (a plugin with
    /// nothing to say), as are `{"action":"pass"}`.
    ///
    /// # Errors
    /// Any other shape, named.
    pub fn from_reply(reply: &Value, form: Form) -> Result<Decision, BadDecision> {
        match reply {
            Value::Null => Ok(Decision::Pass),
            Value::String(s) if form == Form::StringsReplaceOrBlock => Ok(if s == IGNORED {
                Decision::Block { reason: "ignored by the plugin".into() }
            } else {
                Decision::Replace(Value::String(s.clone()))
            }),
            Value::Object(map) if map.is_empty() => Ok(Decision::Pass),
            Value::Object(map) => match map.get("action").and_then(Value::as_str) {
                Some("pass") => Ok(Decision::Pass),
                Some("replace") => match map.get("value") {
                    Some(v) => Ok(Decision::Replace(v.clone())),
                    None => Err(BadDecision("`replace` without `value`".into())),
                },
                Some("block") => Ok(Decision::Block {
                    reason: map.get("reason").and_then(Value::as_str).unwrap_or("blocked by a plugin").to_owned(),
                }),
                Some(other) => Err(BadDecision(format!("unknown action `{other}` (pass, replace, block)"))),
                None => Err(BadDecision("an object without `action`".into())),
            },
            other => Err(BadDecision(format!("{} is not an action object", crate::protocol::json_kind(other)))),
        }
    }
}

/// Where a plugin's priority comes from: the two ecosystems order opposite
/// ways, so both map onto one ascending key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrioritySource {
    /// plugin.json (FaustBot): smaller first, default 100.
    Json(Option<i64>),
    /// plugin.toml (LibreFang's field): larger first, default 0.
    Toml(Option<i64>),
}

/// The order key of a plugin: ascending, ties broken by name.
pub fn order_key(source: PrioritySource) -> i64 {
    match source {
        PrioritySource::Json(p) => p.unwrap_or(100),
        PrioritySource::Toml(p) => p.unwrap_or(0).saturating_neg(),
    }
}

/// Sorts `(name, key)` pairs into chain order.
pub fn order<T>(plugins: &mut [(String, i64, T)]) {
    plugins.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
}

/// The end of a chain.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The value after every plugin had its say.
    Value(Value),
    /// A plugin blocked; later plugins were not asked.
    Blocked { plugin: String, reason: String },
}

/// A plugin that failed or answered something that is not a decision; it
/// counted as a pass.
#[derive(Debug, Clone, PartialEq)]
pub struct Skipped {
    pub plugin: String,
    pub error: String,
}

/// Runs the chain: each plugin in `plugins` (already in [`order`]) is asked
/// with the current value; a replace changes it, a block ends the chain, a
/// failure is recorded and counts as a pass.
pub async fn chain<F, Fut>(plugins: &[String], initial: Value, form: Form, mut call: F) -> (Outcome, Vec<Skipped>)
where
    F: FnMut(&str, &Value) -> Fut,
    Fut: Future<Output = Result<Value, String>>,
{
    let mut value = initial;
    let mut skipped = Vec::new();
    for plugin in plugins {
        let reply = match call(plugin, &value).await {
            Ok(reply) => reply,
            Err(error) => {
                skipped.push(Skipped { plugin: plugin.clone(), error });
                continue;
            }
        };
        match Decision::from_reply(&reply, form) {
            Ok(Decision::Pass) => {}
            Ok(Decision::Replace(v)) => value = v,
            Ok(Decision::Block { reason }) => {
                return (Outcome::Blocked { plugin: plugin.clone(), reason }, skipped);
            }
            Err(e) => skipped.push(Skipped { plugin: plugin.clone(), error: e.to_string() }),
        }
    }
    (Outcome::Value(value), skipped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn replies_read_as_decisions() {
        let strict = |v: Value| Decision::from_reply(&v, Form::Strict);
        assert_eq!(strict(json!(null)), Ok(Decision::Pass));
        assert_eq!(strict(json!({})), Ok(Decision::Pass));
        assert_eq!(strict(json!({"action": "pass"})), Ok(Decision::Pass));
        assert_eq!(strict(json!({"action": "replace", "value": {"a": 1}})), Ok(Decision::Replace(json!({"a": 1}))));
        assert_eq!(
            strict(json!({"action": "block", "reason": "rm -rf"})),
            Ok(Decision::Block { reason: "rm -rf".into() })
        );
        assert!(strict(json!({"action": "replace"})).unwrap_err().to_string().contains("without `value`"));
        assert!(strict(json!({"action": "drop"})).unwrap_err().to_string().contains("unknown action `drop`"));
        assert!(strict(json!("text")).unwrap_err().to_string().contains("a string"));

        let faust = |v: Value| Decision::from_reply(&v, Form::StringsReplaceOrBlock);
        assert_eq!(faust(json!("hello")), Ok(Decision::Replace(json!("hello"))));
        assert!(matches!(faust(json!(IGNORED)), Ok(Decision::Block { .. })));
    }

    #[test]
    fn both_priority_conventions_map_onto_one_ascending_order() {
        let mut plugins = vec![
            ("toml-high".to_owned(), order_key(PrioritySource::Toml(Some(50))), ()),
            ("json-default".to_owned(), order_key(PrioritySource::Json(None)), ()),
            ("json-first".to_owned(), order_key(PrioritySource::Json(Some(1))), ()),
            ("toml-default-b".to_owned(), order_key(PrioritySource::Toml(None)), ()),
            ("toml-default-a".to_owned(), order_key(PrioritySource::Toml(None)), ()),
        ];
        order(&mut plugins);
        let names: Vec<&str> = plugins.iter().map(|p| p.0.as_str()).collect();
        assert_eq!(names, ["toml-high", "toml-default-a", "toml-default-b", "json-first", "json-default"]);
    }

    fn run(replies: Vec<(&'static str, Result<Value, String>)>) -> (Outcome, Vec<Skipped>, Vec<String>) {
        let plugins: Vec<String> = replies.iter().map(|(n, _)| n.to_string()).collect();
        let seen = std::cell::RefCell::new(Vec::new());
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let (outcome, skipped) = rt.block_on(chain(&plugins, json!("start"), Form::Strict, |plugin, value| {
            seen.borrow_mut().push(format!("{plugin}<{value}"));
            let reply = replies.iter().find(|(n, _)| *n == plugin).unwrap().1.clone();
            async move { reply }
        }));
        (outcome, skipped, seen.into_inner())
    }

    #[test]
    fn a_chain_passes_values_along_and_a_block_stops_it() {
        let (outcome, skipped, seen) = run(vec![
            ("a", Ok(json!({"action": "replace", "value": "one"}))),
            ("b", Ok(json!({"action": "pass"}))),
            ("c", Ok(json!({"action": "replace", "value": "two"}))),
        ]);
        assert_eq!(outcome, Outcome::Value(json!("two")));
        assert!(skipped.is_empty());
        assert_eq!(seen, ["a<\"start\"", "b<\"one\"", "c<\"one\""], "each sees the previous value");

        let (outcome, _, seen) = run(vec![
            ("a", Ok(json!({"action": "block", "reason": "no"}))),
            ("b", Ok(json!({"action": "replace", "value": "never"}))),
        ]);
        assert_eq!(outcome, Outcome::Blocked { plugin: "a".into(), reason: "no".into() });
        assert_eq!(seen.len(), 1, "later plugins are not asked");
    }

    #[test]
    fn a_failing_plugin_is_isolated() {
        let (outcome, skipped, seen) = run(vec![
            ("a", Err("exit code 1".into())),
            ("b", Ok(json!({"action": "explode"}))),
            ("c", Ok(json!({"action": "replace", "value": "kept"}))),
        ]);
        assert_eq!(outcome, Outcome::Value(json!("kept")), "the others still have their say");
        assert_eq!(skipped.iter().map(|s| s.plugin.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert!(skipped[1].error.contains("unknown action"));
        assert_eq!(seen.len(), 3);
    }
}
