//! Component plugins on wasmtime (issue 4, in progress): loading, describe,
//! typed calls through the same JSON replies as script plugins.

use ctxhost::protocol::{HookName, HookRequest};
use ctxhost::runner::wasm::component::{ComponentRunner, Limits};
use serde_json::json;

use crate::util::examples::component;

fn redact() -> ComponentRunner {
    let data = tempfile::tempdir().unwrap();
    ComponentRunner::load("redact", &component("redact"), Limits::default(), Default::default(), data.path().to_owned())
        .unwrap()
}

#[test]
fn describe_lists_the_implemented_hooks() {
    assert_eq!(redact().hooks().iter().copied().collect::<Vec<_>>(), [HookName::TransformToolResult]);
}

#[test]
fn the_redaction_component_rewrites_secrets_and_leaves_clean_text_alone() {
    let r = redact();
    let call = |result: &str| {
        let req = HookRequest::from_json(HookName::TransformToolResult, json!({"tool_name": "env", "result": result}))
            .unwrap();
        r.call_sync(&req).unwrap()
    };
    assert_eq!(
        call("OPENAI_API_KEY=sk-abcdefghijklmnopqrstuvwxyz123456 and ghp_0123456789abcdefghijklmnopqrstuvwxyz!"),
        json!({"content": "OPENAI_API_KEY=[REDACTED] and [REDACTED]!"})
    );
    assert_eq!(call("nothing secret, sk-short"), json!({}), "no change is an empty reply");
}

#[test]
fn a_hook_the_component_does_not_implement_is_no_opinion() {
    let req = HookRequest::from_json(HookName::Ingest, json!({"agent_id": "a", "message": "m"})).unwrap();
    assert_eq!(redact().call_sync(&req).unwrap(), json!({"memories": []}));
}

#[test]
fn a_core_module_or_garbage_is_refused_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("x.wasm");
    std::fs::write(&file, b"\0asm\x01\0\0\0").unwrap();
    let err = ComponentRunner::load("x", &file, Limits::default(), Default::default(), dir.path().to_owned())
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("not a WebAssembly component"), "{err}");
}
