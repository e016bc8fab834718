//! The typed entry points of the agent-loop hooks (`message_received`,
//! `llm_request_pre`, `tool_call_pre/post`, `agent_event_sent`,
//! `memory_*`): each builds the hook's fields and runs its chain or its
//! observers. Nothing here decides a combine rule (that is `decision`).

use serde_json::{Value, json};

use super::*;

impl AgentEngine {
    /// `message_received`: the text to go on with, or the block (message
    /// dropped).
    pub async fn message_received(
        &self,
        agent_id: &str,
        text: &str,
        origin: &str,
        history: Value,
    ) -> Result<String, Blocked> {
        let fields = obj(json!({"agent_id": agent_id, "text": text, "origin": origin, "history": history}));
        let out = self.chain(HookName::MessageReceived, fields).await?;
        Ok(match out.get("text") {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => String::new(),
        })
    }

    /// `llm_request_pre`: the messages to send.
    pub async fn llm_request_pre(&self, agent_id: &str, messages: Value) -> Value {
        let fields = obj(json!({"agent_id": agent_id, "messages": messages.clone()}));
        match self.chain(HookName::LlmRequestPre, fields).await {
            Ok(mut f) => f.remove("messages").unwrap_or(messages),
            // A block is not a rule of this hook: the request goes out as it was.
            Err(_) => messages,
        }
    }

    /// `tool_call_pre`: the (possibly rewritten) args, or the denial.
    pub async fn tool_call_pre(&self, agent_id: &str, name: &str, args: Value) -> Result<Value, Blocked> {
        let fields = obj(json!({"agent_id": agent_id, "name": name, "args": args}));
        let mut out = self.chain(HookName::ToolCallPre, fields).await?;
        Ok(out.remove("args").unwrap_or(Value::Null))
    }

    /// `tool_call_post`: the result the model sees.
    pub async fn tool_call_post(
        &self,
        agent_id: &str,
        name: &str,
        args: &Value,
        result: Value,
        is_error: bool,
    ) -> Value {
        let fields = obj(
            json!({"agent_id": agent_id, "name": name, "args": args, "result": result.clone(), "is_error": is_error}),
        );
        match self.chain(HookName::ToolCallPost, fields).await {
            Ok(mut f) => f.remove("result").unwrap_or(result),
            Err(_) => result,
        }
    }

    /// `agent_event_sent`: the event to send, or `None` when suppressed.
    pub async fn agent_event_sent(&self, event: Value) -> Option<Value> {
        let out = self.chain(HookName::AgentEventSent, obj(json!({"event": event}))).await.ok()?;
        out.get("event").cloned()
    }

    /// `memory_read_pre`: the query to run.
    pub async fn memory_read_pre(&self, query: Value, filters: Value) -> Value {
        let fields = obj(json!({"query": query.clone(), "filters": filters}));
        self.chain(HookName::MemoryReadPre, fields).await.ok().and_then(|mut f| f.remove("query")).unwrap_or(query)
    }

    /// `memory_read_post`: the results to return.
    pub async fn memory_read_post(&self, query: Value, results: Value) -> Value {
        let fields = obj(json!({"query": query, "results": results.clone()}));
        self.chain(HookName::MemoryReadPost, fields).await.ok().and_then(|mut f| f.remove("results")).unwrap_or(results)
    }

    /// `memory_write_pre`: the content to write, or the refusal.
    pub async fn memory_write_pre(&self, content: Value, metadata: Value) -> Result<Value, Blocked> {
        let fields = obj(json!({"content": content, "metadata": metadata}));
        let mut out = self.chain(HookName::MemoryWritePre, fields).await?;
        Ok(out.remove("content").unwrap_or(Value::Null))
    }

    /// `memory_write_post`: every plugin observes the stored write.
    pub async fn memory_write_post(&self, content: Value, metadata: Value, id: Value) {
        self.observe(HookName::MemoryWritePost, obj(json!({"content": content, "metadata": metadata, "id": id}))).await;
    }
}
