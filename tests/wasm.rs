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

/// A plugin directory holding the `redact` component.
fn redact_plugin(root: &std::path::Path, extra: &str) -> std::path::PathBuf {
    let dir = root.join("plugins/redact");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(component("redact"), dir.join("redact.wasm")).unwrap();
    std::fs::write(
        dir.join("plugin.toml"),
        format!("name = \"redact\"\nversion = \"0.1.0\"\nruntime = \"wasm\"\ncomponent = \"redact.wasm\"\n{extra}\n"),
    )
    .unwrap();
    dir
}

#[test]
fn ctxhost_hook_runs_a_component_like_a_script() {
    let root = tempfile::tempdir().unwrap();
    let dir = redact_plugin(root.path(), "[sandbox]\nfuel = 50000000\nmemory_mb = 32\n");
    let a = crate::util::ctxhost()
        .arg("--home")
        .arg(root.path().join("home"))
        .args(["hook", dir.to_str().unwrap(), "transform_tool_result"])
        .write_stdin(r#"{"tool_name":"env","result":"token: xoxb-1234567890-abcdef"}"#)
        .assert()
        .success();
    assert_eq!(crate::util::reply(&a), json!({"content": "token: [REDACTED]"}));
    let a = crate::util::ctxhost()
        .arg("--home")
        .arg(root.path().join("home"))
        .args(["hook", dir.to_str().unwrap(), "ingest"])
        .write_stdin("{}")
        .assert()
        .failure();
    assert_eq!(
        crate::util::stderr(&a),
        "error: plugin 'redact' has no `ingest` hook (it declares: transform_tool_result)\n"
    );
}

#[test]
fn a_component_takes_part_in_a_stack_with_script_plugins() {
    use ctxhost::engine::ContextEngine;
    let root = tempfile::tempdir().unwrap();
    redact_plugin(root.path(), "");
    let shout = root.path().join("plugins/shout");
    crate::util::write(
        &shout.join("plugin.toml"),
        "name = \"shout\"\nversion = \"1\"\n[hooks]\nruntime = \"bash\"\ntransform_tool_result = \"t.sh\"\n",
    );
    crate::util::write(&shout.join("t.sh"), "echo '{\"content\":\"SHOUTED\"}'\n");
    let home = ctxhost::home::Home::resolve(
        ctxhost::home::HomeOverrides {
            home: Some(root.path().join("home")),
            plugins_dir: Some(root.path().join("plugins")),
            config: None,
        },
        &|_| None,
    );
    crate::util::write(home.config_file(), "[context_engine]\nplugin_stack = [\"redact\", \"shout\"]\n");
    let (config, _) = ctxhost::config::HostConfig::load(home.config_file()).unwrap();
    let cx = ctxhost::plugin::LoadContext {
        home: &home,
        config: &config,
        host_env: &ctxhost::plugin::LoadContext::process_env,
    };
    let (engine, warnings) = ctxhost::engine::stack::load_stack(&cx).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let secret = ctxhost::protocol::TransformToolResultRequest::new(
        "a",
        "env",
        "t1",
        json!({}),
        "key sk-abcdefghijklmnopqrstuvwxyz",
        false,
    );
    assert_eq!(
        rt.block_on(engine.transform_tool_result(&secret)).unwrap(),
        "key [REDACTED]",
        "the component's rewrite wins"
    );
    let clean = ctxhost::protocol::TransformToolResultRequest::new("a", "env", "t2", json!({}), "nothing here", false);
    assert_eq!(
        rt.block_on(engine.transform_tool_result(&clean)).unwrap(),
        "SHOUTED",
        "no change moves on to the next layer"
    );
    assert_eq!(engine.metrics().by_plugin()["redact"]["transform_tool_result"].calls, 2);
}
