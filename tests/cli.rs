//! `ctxhost hook` and `ctxhost doctor` as a user runs them.

use serde_json::Value;

use crate::util::{TestPlugin, ctxhost, reply, stderr, write};

#[test]
fn hook_by_name_from_the_plugins_dir_with_an_input_file() {
    let p = TestPlugin::bash("after_turn", "cat\n", "");
    let input = p.root.path().join("req.json");
    write(&input, r#"{"agent_id":"a","messages":[{"role":"user","content":"hi"}]}"#);
    let a = p
        .cmd()
        .args(["--plugins-dir", p.dir.parent().unwrap().to_str().unwrap(), "hook", "t", "after_turn", "--input"])
        .arg(&input)
        .assert()
        .success();
    assert_eq!(
        reply(&a),
        serde_json::json!({"type":"after_turn","agent_id":"a","messages":[{"role":"user","content":"hi","pinned":false}]})
    );
}

#[test]
fn plugins_dir_from_the_environment() {
    let p = TestPlugin::bash("ingest", "echo '{\"ok\":1}'\n", "");
    let a = p
        .cmd()
        .env("CTXHOST_PLUGINS_DIR", p.dir.parent().unwrap())
        .args(["hook", "t", "ingest"])
        .write_stdin("")
        .assert()
        .success();
    assert_eq!(reply(&a), serde_json::json!({"ok": 1}));
}

#[test]
fn unknown_plugin_and_hook_say_what_is_valid() {
    let p = TestPlugin::bash("ingest", "echo '{}'\n", "");
    let plugins = p.dir.parent().unwrap().to_str().unwrap().to_owned();
    let a = p.cmd().args(["--plugins-dir", &plugins, "hook", "u", "ingest"]).assert().failure().code(1);
    assert_eq!(
        stderr(&a),
        format!(
            "error: no plugin `u`: it is not a directory, and `{plugins}` has no plugin of that name; did you mean `t`?\n"
        )
    );
    let a = p.cmd().args(["hook", p.dir.to_str().unwrap(), "asemble"]).assert().failure().code(1);
    assert!(stderr(&a).ends_with("did you mean `assemble`?\n"), "{}", stderr(&a));
    let a = p.hook("compact", "{}").failure().code(1);
    assert_eq!(stderr(&a), "error: plugin 't' has no `compact` hook (it declares: ingest)\n");
}

#[test]
fn bad_requests_are_refused_before_running_anything() {
    let p = TestPlugin::bash("ingest", "touch ran\necho '{}'\n", "");
    let a = p.hook("ingest", "{not json").failure().code(1);
    assert!(
        stderr(&a).starts_with("error: the request is not valid JSON: key must be a string at line 1"),
        "{}",
        stderr(&a)
    );
    let a = p.hook("ingest", r#"{"type":"compact"}"#).failure().code(1);
    assert_eq!(stderr(&a), "error: the request's `type` is \"compact\" but the hook is `ingest`\n");
    assert!(!p.dir.join("ran").exists());
}

#[test]
fn a_bad_manifest_names_file_key_and_reason() {
    let p = TestPlugin::new("t", &[("plugin.toml", "name = \"t\"\nversion = \"1\"\n[hooks]\ningest = \"../x.sh\"\n")]);
    let a = p.hook("ingest", "{}").failure().code(1);
    assert_eq!(
        stderr(&a),
        format!(
            "error: invalid plugin manifest `{}`, key `hooks.ingest`: Path traversal denied: ../x.sh\n",
            p.dir.join("plugin.toml").display()
        )
    );
}

#[test]
fn manifest_warnings_are_shown_but_the_hook_runs() {
    let p = TestPlugin::bash("ingest", "echo '{}'\n", "colour = \"blue\"");
    let a = p.hook("ingest", "{}").success();
    assert!(stderr(&a).contains("unknown key `colour` is ignored"), "{}", stderr(&a));
}

#[test]
fn doctor_json_has_librefangs_shape() {
    let p = TestPlugin::bash("ingest", "echo '{}'\n", "");
    let plugins = p.dir.parent().unwrap();
    write(&plugins.join("broken/plugin.toml"), "name = \"broken\"\n");
    write(
        &plugins.join("comp/plugin.toml"),
        "name = \"comp\"\nversion = \"1\"\n[hooks]\nruntime = \"wasm\"\ningest = \"hooks/x.wasm\"\n",
    );
    write(&plugins.join("comp/hooks/x.wasm"), "");
    write(
        &plugins.join("nat/plugin.toml"),
        "name = \"nat\"\nversion = \"1\"\n[hooks]\nruntime = \"native\"\ningest = \"hooks/run\"\n",
    );
    write(&plugins.join("nat/hooks/run"), "not executable, no shebang");
    let a = ctxhost()
        .args(["--home"])
        .arg(&p.home)
        .args(["--plugins-dir", p.dir.parent().unwrap().to_str().unwrap(), "doctor", "--json"])
        .assert()
        .failure()
        .code(1);
    let report: Value = serde_json::from_slice(&a.get_output().stdout).unwrap();
    let runtimes = report["runtimes"].as_array().unwrap();
    let names: Vec<&str> = runtimes.iter().map(|r| r["runtime"].as_str().unwrap()).collect();
    assert_eq!(names, ["python", "native", "v", "node", "deno", "go", "ruby", "bash", "bun", "php", "lua", "wasm"]);
    let bash = runtimes.iter().find(|r| r["runtime"] == "bash").unwrap();
    assert_eq!(bash["available"], true);
    assert!(bash["version"].as_str().unwrap().starts_with("GNU bash"));
    for key in ["runtime", "launcher", "available", "version", "install_hint"] {
        assert!(bash.get(key).is_some(), "{key}");
    }
    let plugins = report["plugins"].as_array().unwrap();
    let names: Vec<&str> = plugins.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["broken", "comp", "nat", "t"]);
    assert_eq!(plugins[0]["hooks_valid"], false);
    assert!(plugins[0]["error"].as_str().unwrap().contains("key `version`: missing required key"));
    assert_eq!((&plugins[1]["runtime"], &plugins[1]["hooks_valid"]), (&Value::from("wasm"), &Value::from(false)));
    assert!(plugins[1]["error"].as_str().unwrap().contains("cannot compile it"), "{}", plugins[1]);
    assert_eq!(plugins[2]["hooks_valid"], false, "{}", plugins[2]);
    assert!(plugins[2]["error"].as_str().unwrap().contains("neither executable nor a script"), "{}", plugins[2]);
    // LibreFang's fields as before, and the catalog's `state` besides.
    assert_eq!(plugins[3]["state"], "loaded", "{}", plugins[3]);
    let librefang =
        ["name", "runtime", "runtime_available", "hooks_valid", "install_hint", "error", "missing_binaries"];
    let projected: serde_json::Map<String, Value> =
        librefang.iter().filter_map(|k| plugins[3].get(*k).map(|v| ((*k).to_owned(), v.clone()))).collect();
    assert_eq!(
        Value::Object(projected),
        serde_json::json!({"name":"t","runtime":"bash","runtime_available":true,"hooks_valid":true,
            "install_hint":"Install bash via your OS package manager (pre-installed on most Unix-like systems)"})
    );
}

#[test]
fn doctor_text_report() {
    let p = TestPlugin::bash("ingest", "echo '{}'\n", "");
    let a = ctxhost()
        .args(["--home"])
        .arg(&p.home)
        .args(["--plugins-dir", p.dir.parent().unwrap().to_str().unwrap(), "doctor"])
        .assert()
        .success();
    let out = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    assert!(out.starts_with("Runtimes\n"), "{out}");
    assert!(out.contains("\n  ok  bash    /"), "{out}");
    assert!(out.contains("\n  t                    bash    ok\n"), "{out}");
}

#[test]
fn help_has_examples() {
    let a = ctxhost().args(["hook", "--help"]).assert().success();
    let out = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    assert!(out.contains("Examples:") && out.contains("--timeout-secs"), "{out}");
}

#[test]
fn demo_runs_the_bundled_stack_and_reports_json() {
    crate::util::require_program("python3", "python3");
    let a = ctxhost().args(["demo", "--json"]).assert().success();
    let out = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    let lines: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 6, "five turns and the metrics: {out}");
    let turn4 = &lines[3];
    assert_eq!(turn4["turn"], 4);
    let sources: Vec<&str> =
        turn4["memories"].as_array().unwrap().iter().map(|m| m["source"].as_str().unwrap()).collect();
    assert!(
        sources.contains(&"default") && sources.contains(&"python-memory") && sources.contains(&"bash-memory"),
        "{sources:?}"
    );
    let tool_results = lines[2]["tool_results"].as_array().unwrap();
    assert_eq!(tool_results.len(), 1);
    for key in ["assembled", "compacted", "elapsed_ms"] {
        assert!(turn4.get(key).is_some(), "{key}");
    }
    assert_eq!(lines[5]["metrics"]["hooks"]["ingest"]["calls"], 10);
}

#[test]
fn run_reads_a_transcript_and_names_a_bad_line() {
    let p = TestPlugin::bash("ingest", "echo '{\"memories\":[{\"content\":\"from t\"}]}'\n", "");
    write(&p.home.join("config.toml"), "[context_engine]\nplugin = \"t\"\n");
    let plugins = p.dir.parent().unwrap().to_str().unwrap().to_owned();
    let transcript = p.root.path().join("chat.jsonl");
    write(&transcript, "{\"user\":\"hello\",\"assistant\":\"hi\"}\n{\"user\":\"hello again\",\"assistant\":\"yes\"}\n");
    let a =
        p.cmd().args(["--plugins-dir", &plugins, "run", "--json", "--transcript"]).arg(&transcript).assert().success();
    let out = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    let first: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(first["memories"], serde_json::json!([{"content": "from t", "source": "t"}]));
    let second: Value = serde_json::from_str(out.lines().nth(1).unwrap()).unwrap();
    assert!(second["memories"].as_array().unwrap().iter().any(|m| m["source"] == "default" && m["content"] == "hello"));

    write(&transcript, "{\"user\":\"hello\",\"assistant\":\"hi\"}\n{\"user\":\"oops\"}\n");
    let a = p.cmd().args(["run", "--transcript"]).arg(&transcript).assert().failure().code(1);
    assert_eq!(stderr(&a), "error: transcript line 2: missing field `assistant` at line 1 column 15\n");
}

/// The metrics table of `ctxhost run` shows measured percentiles, not the
/// bounds of histogram buckets (50, 100, 200, 500, …).
#[test]
fn run_metrics_show_real_latency_percentiles() {
    let p = TestPlugin::bash("ingest", "cat > /dev/null\nsleep 0.13\necho '{\"memories\":[]}'\n", "");
    write(&p.home.join("config.toml"), "[context_engine]\nplugin = \"t\"\n");
    let plugins = p.dir.parent().unwrap().to_str().unwrap().to_owned();
    let transcript = p.root.path().join("chat.jsonl");
    write(&transcript, &"{\"user\":\"hello\",\"assistant\":\"hi\"}\n".repeat(3));
    let a = p.cmd().args(["--plugins-dir", &plugins, "run", "--transcript"]).arg(&transcript).assert().success();
    let out = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    let header = out.lines().find(|l| l.trim_start().starts_with("plugin ")).unwrap_or_else(|| panic!("{out}"));
    assert!(header.ends_with("p50 ms   p99 ms"), "{header}");
    let row: Vec<&str> = out
        .lines()
        .find(|l| l.split_whitespace().take(2).eq(["t", "ingest"]))
        .unwrap_or_else(|| panic!("no ingest row: {out}"))
        .split_whitespace()
        .collect();
    assert_eq!(row[2..6], ["3", "3", "0", "0"], "calls, ok, failed, fallbacks: {row:?}");
    let (p50, p99): (f64, f64) = (row[6].parse().unwrap(), row[7].parse().unwrap());
    assert!(p50 >= 130.0 && p99 >= p50, "the hook sleeps 130 ms: p50 {p50}, p99 {p99}");
    const BOUNDS: [f64; 6] = [200.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0];
    assert!(!BOUNDS.contains(&p50) && !BOUNDS.contains(&p99), "measured, not bucket bounds: {row:?}");

    let a =
        p.cmd().args(["--plugins-dir", &plugins, "run", "--json", "--transcript"]).arg(&transcript).assert().success();
    let out = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    let metrics: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    let ingest = &metrics["metrics"]["plugins"]["t"]["ingest"];
    let p50 = ingest["p50_ms"].as_f64().unwrap();
    assert!(p50 >= 130.0 && !BOUNDS.contains(&p50), "{ingest}");
}

/// A newcomer's request for `tool_call_pre` with `tool_name` (the field is
/// `name`): warned about on stderr with the nearest field, and still run with
/// the request as given.
#[test]
fn hook_warns_about_unknown_request_fields_and_still_runs() {
    let p = TestPlugin::bash("tool_call_pre", "cat > \"$0.request\"\necho '{\"action\":\"pass\"}'\n", "");
    let a = p.hook("tool_call_pre", r#"{"tool_name":"shell_exec","args":{"command":"ls"},"agent_id":"a1"}"#).success();
    assert_eq!(reply(&a), serde_json::json!({"action": "pass"}));
    let err = stderr(&a);
    assert!(
        err.contains(
            "a `tool_call_pre` request has no field `tool_name`; did you mean `name`? \
             (its fields: agent_id, name, args); it is sent to the plugin as given"
        ),
        "{err}"
    );
    assert_eq!(err.matches("has no field").count(), 1, "known fields are not warned about: {err}");
    let received: Value =
        serde_json::from_str(&std::fs::read_to_string(p.dir.join("hooks/tool_call_pre.sh.request")).unwrap()).unwrap();
    assert_eq!(received["tool_name"], "shell_exec", "the request reached the plugin as given");

    // A request with only known fields: no warning.
    let a = p.hook("tool_call_pre", r#"{"type":"tool_call_pre","name":"ls","args":{}}"#).success();
    assert!(!stderr(&a).contains("has no field"), "{}", stderr(&a));
}
