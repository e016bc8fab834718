//! Every guest example through its real interpreter, against one shared test set.
//!
//! The examples in `guest-examples/` implement the same tiny memory (see its
//! README) — as scripts in every runtime and as a component (`recall`): `after_turn` stores what the user said, `ingest` recalls notes
//! sharing a word of 4+ letters, newest first, at most 3, per agent.

use serde_json::{Value, json};

use crate::util::{TestPlugin, example, reply, require_program, stderr};

fn after_turn(p: &TestPlugin, agent: &str, messages: Value) {
    let req = json!({"agent_id": agent, "messages": messages}).to_string();
    let a = p.hook("after_turn", &req).success();
    assert_eq!(reply(&a), json!({"type": "ok"}));
}

fn recall(p: &TestPlugin, agent: &str, message: &str) -> Vec<String> {
    let req = json!({"agent_id": agent, "message": message, "peer_id": null}).to_string();
    let a = p.hook("ingest", &req).success();
    let r = reply(&a);
    let log = stderr(&a);
    assert!(
        log.contains("plugin_stderr") || log.contains("plugin_log"),
        "the example logs one line (scripts to stderr, components through the host's log): {log}"
    );
    assert_eq!(r["type"], "ingest_result", "{r}");
    r["memories"].as_array().unwrap().iter().map(|m| m["content"].as_str().unwrap().to_owned()).collect()
}

/// The shared test set.
fn check(name: &str) {
    let p = example(name);
    let tricky = "My garden has \"heirloom\" tomatoes,\ncafé ☕ basil and a C:\\shed";
    after_turn(
        &p,
        "a1",
        json!([
            {"role": "system", "content": "be helpful", "pinned": true},
            {"role": "user", "content": tricky},
            {"role": "assistant", "content": "What a garden!"},
            {"role": "user", "content": [
                {"type": "text", "text": "I also keep bees"},
                {"type": "image", "media_type": "image/png", "data": "AAAA"},
                {"type": "text", "text": "and chickens"}
            ]},
            {"role": "user", "content": ""}
        ]),
    );
    after_turn(&p, "a2", json!([{"role": "user", "content": "my garden is secret"}]));

    assert_eq!(recall(&p, "a1", "Tell me about my GARDEN"), [tricky]);
    assert_eq!(recall(&p, "a1", "bees, chickens?"), ["I also keep bees\nand chickens"]);
    assert_eq!(recall(&p, "a1", "zebras are odd"), Vec::<String>::new());
    assert_eq!(recall(&p, "a2", "garden"), ["my garden is secret"]);
    assert_eq!(recall(&p, "a3", "garden"), Vec::<String>::new());

    after_turn(
        &p,
        "a3",
        json!([
            {"role": "user", "content": "herbs one"},
            {"role": "user", "content": "herbs two"},
            {"role": "user", "content": "herbs three"},
            {"role": "user", "content": "herbs four"},
            {"role": "user", "content": "herbs two"}
        ]),
    );
    assert_eq!(
        recall(&p, "a3", "herbs"),
        ["herbs two", "herbs four", "herbs three"],
        "newest first, unique, at most 3"
    );
}

#[test]
fn python() {
    require_program("python3", "python3");
    check("python-memory");
}

#[test]
fn node() {
    require_program("node", "nodejs");
    check("node-memory");
}

#[test]
fn bash() {
    require_program("bash", "bash");
    check("bash-memory");
}

#[test]
fn go() {
    require_program("go", "golang-go");
    check("go-memory");
}

#[test]
fn ruby() {
    require_program("ruby", "ruby");
    check("ruby-memory");
}

#[test]
fn lua() {
    require_program("lua", "lua5.4");
    check("lua-memory");
}

#[test]
fn php() {
    require_program("php", "php-cli");
    check("php-memory");
}

#[test]
fn native() {
    check("native-memory");
}

#[test]
fn component() {
    check("recall");
}

/// Every `__pycache__` below `dir`.
fn pycaches(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            if entry.file_name() == "__pycache__" {
                found.push(path.clone());
            }
            found.extend(pycaches(&path));
        }
    }
    found
}

/// Python hooks run with `-B`: a hook importing a module of its own (a
/// one-shot script, the guard's JSON-RPC worker importing its client) leaves
/// no bytecode in the plugin's dir, which the hook may write.
#[test]
fn python_hooks_write_no_bytecode_into_the_plugin_dir() {
    require_program("python3", "python3");
    let p = TestPlugin::new(
        "importer",
        &[
            (
                "plugin.toml",
                "name = \"importer\"\nversion = \"1\"\n[hooks]\nruntime = \"python\"\ningest = \"hooks/ingest.py\"\n",
            ),
            ("hooks/helper.py", "def memories():\n    return [{\"content\": \"from helper\"}]\n"),
            (
                "hooks/ingest.py",
                "import json, sys\nimport helper\nsys.stdin.read()\nopen('wrote-here', 'w').write('x')\n\
                 print(json.dumps({\"memories\": helper.memories()}))\n",
            ),
        ],
    );
    let a = p.hook("ingest", r#"{"agent_id":"a","message":"m"}"#).success();
    assert_eq!(reply(&a)["memories"][0]["content"], "from helper");
    assert!(p.dir.join("wrote-here").exists(), "the plugin's dir is writable, so python could have written there");
    assert_eq!(pycaches(&p.dir), Vec::<std::path::PathBuf>::new());

    let guard = example("guard-python");
    let req = json!({"name": "shell_exec", "args": {"command": "ls"}, "agent_id": "a"}).to_string();
    let a = guard.hook("tool_call_pre", &req).success();
    assert_eq!(reply(&a), json!({"action": "pass"}));
    assert_eq!(pycaches(&guard.dir), Vec::<std::path::PathBuf>::new());
}
