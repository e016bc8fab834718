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

fn text_of(m: &Value) -> String {
    match &m["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks.iter().filter_map(|b| b["text"].as_str()).collect::<Vec<_>>().join(" "),
        _ => String::new(),
    }
}

fn block_types(m: &Value) -> Vec<String> {
    m["content"].as_array().map_or(Vec::new(), |b| b.iter().map(|b| b["type"].as_str().unwrap().to_owned()).collect())
}

#[test]
fn demo_runs_the_bundled_stack_and_reports_json() {
    crate::util::require_program("python3", "python3");
    let a = ctxhost().args(["demo", "--json"]).assert().success();
    let out = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    let lines: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 7, "the run, five turns and the metrics: {out}");
    let run = &lines[0]["run"];
    assert_eq!(run["stack"], serde_json::json!(["python-memory", "bash-memory", "shorten-results"]));
    assert_eq!(run["memory"]["kind"], "throw-away");
    let window = run["context_window_tokens"].as_u64().unwrap();
    let turns = &lines[1..6];

    // A window trimmed by the built-in assemble: which messages, why, tokens before/after.
    let trims: Vec<&Value> =
        turns.iter().flat_map(|t| t["calls"].as_array().unwrap()).filter_map(|c| c.get("trim")).collect();
    assert!(!trims.is_empty(), "some model call is trimmed: {out}");
    for t in &trims {
        assert_eq!(t["by"], "built-in");
        assert!(t["tokens_before"].as_u64().unwrap() > window && t["tokens_after"].as_u64().unwrap() <= window, "{t}");
        for d in t["dropped"].as_array().unwrap() {
            assert!(d["position"].as_u64().unwrap() >= 1 && d["tokens"].as_u64().unwrap() > 0, "{d}");
            let reason = d["reason"].as_str().unwrap();
            assert!(
                reason.starts_with("did not fit (") || reason.starts_with("older than one that did not fit"),
                "{d}"
            );
        }
    }

    // A compaction with its summary, which the next model call sees first.
    let compacted: Vec<&Value> = turns.iter().filter(|t| t["compaction"].is_object()).collect();
    assert!(!compacted.is_empty(), "{out}");
    let turn = compacted[0];
    let c = &turn["compaction"];
    let summary = c["summary"].as_str().unwrap();
    assert!(summary.starts_with("[Context compaction summary] "), "{summary}");
    assert!(c["tokens_before"].as_u64().unwrap() >= c["threshold"].as_u64().unwrap());
    assert!(c["tokens_after"].as_u64().unwrap() < c["tokens_before"].as_u64().unwrap(), "a compaction shrinks: {c}");
    assert_eq!(turn["compacted"], true);
    assert_eq!(text_of(&turn["calls"][0]["messages"][0]), summary);

    // The system prompt as the model gets it: recalled memories whole.
    for t in turns {
        assert_eq!(t["assembled"][0]["role"], "system");
        assert_eq!(t["assembled"][0]["content"], t["system_prompt"]);
        for m in t["memories"].as_array().unwrap() {
            assert!(
                t["system_prompt"].as_str().unwrap().contains(&format!("\n- {}", m["content"].as_str().unwrap())),
                "{t}"
            );
        }
        // No memory twice.
        let contents: Vec<&str> =
            t["memories"].as_array().unwrap().iter().map(|m| m["content"].as_str().unwrap()).collect();
        let mut unique = contents.clone();
        unique.dedup();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), contents.len(), "{contents:?}");
    }
    let turn4 = &turns[3];
    let garden = turn4["memories"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["content"] == "Hi! My garden has tomatoes and basil this year.")
        .unwrap_or_else(|| panic!("{turn4}"));
    assert_eq!(garden["sources"], serde_json::json!(["default", "python-memory", "bash-memory"]));
    assert_eq!(garden["source"], "default");

    // The tool call in its real order: the question, the assistant's text and
    // tool_use, the tool_result (after transform_tool_result), the answer.
    let turn3 = &turns[2];
    let calls = turn3["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "one call before the tool, one after: {turn3}");
    assert_eq!(block_types(&calls[0]["reply"]), ["text", "tool_use"]);
    assert_eq!(text_of(&calls[0]["reply"]), "Let me check the forecast.");
    assert_eq!(text_of(calls[0]["messages"].as_array().unwrap().last().unwrap()), turn3["user"].as_str().unwrap());
    let seen = calls[1]["messages"].as_array().unwrap();
    let n = seen.len();
    assert_eq!(text_of(&seen[n - 3]), turn3["user"].as_str().unwrap());
    assert_eq!(seen[n - 2], calls[0]["reply"]);
    assert_eq!(block_types(&seen[n - 1]), ["tool_result"]);
    let tool = &turn3["tools"][0];
    assert_eq!(seen[n - 1]["content"][0]["content"], tool["shown"]);
    assert_ne!(tool["result"], tool["shown"]);
    assert!(tool["shown"].as_str().unwrap().contains("[shortened by shorten-results: kept"), "{tool}");
    assert_eq!(turn3["tool_results"], serde_json::json!([tool["shown"]]));
    assert!(text_of(&calls[1]["reply"]).starts_with("Tomorrow in Lyon"));
    // The next turn's history holds the exchange in that order too.
    let history: Vec<String> = turns[3]["calls"][0]["messages"].as_array().unwrap().iter().map(text_of).collect();
    assert!(history.last().unwrap().starts_with("Should I water"), "{history:?}");

    let metrics = &lines[6]["metrics"]["hooks"];
    assert_eq!(metrics["ingest"]["calls"], 10);
    assert_eq!(metrics["transform_tool_result"]["calls"], 1);
}

#[test]
fn demo_text_reads_in_the_order_things_happen_and_fits_a_screenful_or_two() {
    crate::util::require_program("python3", "python3");
    // A user whose own LibreFang holds state of the demo's plugins: the demo's
    // home is throw-away, so there is nothing to upgrade and nothing to say.
    let user = tempfile::tempdir().unwrap();
    let theirs = user.path().join(".librefang/plugins/python-memory/memories.json");
    write(&theirs, "[\"theirs\"]");
    let a = ctxhost().env("HOME", user.path()).arg("demo").assert().success();
    let err = stderr(&a);
    assert!(!err.contains("WARN") && !err.contains("from before"), "the demo is quiet: {err}");
    assert_eq!(std::fs::read_to_string(&theirs).unwrap(), "[\"theirs\"]");
    let out = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    let n = out.lines().count();
    assert!((60..=100).contains(&n), "{n} lines:\n{out}");
    let at = |needle: &str| out.find(needle).unwrap_or_else(|| panic!("no `{needle}` in:\n{out}"));
    assert!(out.starts_with("ctxhost demo: 5 turns through [python-memory, bash-memory, shorten-results]"), "{out}");
    assert!(out.contains("\nmemory: throw-away"), "{out}");
    // Turn 3: the question, the assistant's tool call, the result before and
    // after transform_tool_result, the trimmed second call, the answer.
    let order = [
        "  user:        What is the weather forecast for Lyon tomorrow?",
        "  assistant:   Let me check the forecast. [tool_use weather",
        "  tool:        weather {\"city\":\"Lyon\",\"day\":\"tomorrow\"} returned 598 characters in 10 lines:",
        "  tool result: Lyon tomorrow: sunny, 13 to 24C",
        "[shortened by shorten-results: kept",
        "(after transform_tool_result: ",
        "  model call 2:",
        "    trimmed: the history takes",
        "  assistant:   Tomorrow in Lyon",
        "Turn 4",
        "  compacted:   the history reached",
        "[Context compaction summary]",
    ];
    let places: Vec<usize> = order.iter().map(|s| at(s)).collect();
    assert!(places.windows(2).all(|w| w[0] < w[1]), "out of order {places:?}:\n{out}");
    // The system prompt whole, memories included, not cut.
    assert!(
        out.contains(
            "    system    You are a helpful assistant.\n\n              Relevant memories:\n              - "
        ),
        "{out}"
    );
    assert!(out.contains("              - Hi! My garden has tomatoes and basil this year.\n"), "{out}");
    // Each memory once, naming its recallers.
    assert!(out.contains("\" from default, python-memory, bash-memory\n"), "{out}");
    for turn in out.split("\nTurn ") {
        let recalled: Vec<&str> = turn.lines().filter(|l| l.contains("\" from ")).collect();
        let mut unique = recalled.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), recalled.len(), "{turn}");
    }
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
    let first: Value = serde_json::from_str(out.lines().nth(1).unwrap()).unwrap();
    assert_eq!(first["memories"], serde_json::json!([{"content": "from t", "source": "t", "sources": ["t"]}]));
    let second: Value = serde_json::from_str(out.lines().nth(2).unwrap()).unwrap();
    assert!(second["memories"].as_array().unwrap().iter().any(|m| m["source"] == "default" && m["content"] == "hello"));

    write(&transcript, "{\"user\":\"hello\",\"assistant\":\"hi\"}\n{\"user\":\"oops\"}\n");
    let a = p.cmd().args(["run", "--transcript"]).arg(&transcript).assert().failure().code(1);
    assert_eq!(stderr(&a), "error: transcript line 2: missing field `assistant` at line 1 column 15\n");
}

/// `ctxhost run --json`'s turn lines without their timings.
fn turn_lines(a: &assert_cmd::assert::Assert) -> Vec<Value> {
    let out = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    out.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v.get("turn").is_some())
        .map(|mut v| {
            v.as_object_mut().unwrap().remove("elapsed_ms");
            v
        })
        .collect()
}

#[test]
fn run_is_repeatable_on_a_throw_away_memory_and_remembers_with_memory() {
    let p = TestPlugin::bash("ingest", "echo '{}'\n", "");
    let plugins = p.dir.parent().unwrap().to_str().unwrap().to_owned();
    let transcript = p.root.path().join("chat.jsonl");
    write(
        &transcript,
        "{\"user\":\"my cat is called Tom\",\"assistant\":\"Nice name.\"}\n\
         {\"user\":\"what is my cat called?\",\"assistant\":\"Tom.\"}\n",
    );
    // The throw-away memory lives in TMPDIR and is gone afterwards.
    let tmp = p.root.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let run = |extra: &[&str]| {
        p.cmd()
            .env("TMPDIR", &tmp)
            .args(["--plugins-dir", &plugins, "run", "--json", "--transcript"])
            .arg(&transcript)
            .args(extra)
            .assert()
            .success()
    };
    let first = run(&[]);
    let again = run(&[]);
    assert_eq!(turn_lines(&first), turn_lines(&again), "same transcript, same report");
    let turns = turn_lines(&first);
    assert_eq!(turns[0]["memories"], serde_json::json!([]), "nothing from an earlier run");
    assert_eq!(turns[1]["memories"][0]["content"], "my cat is called Tom", "within a run, turn 1 is recalled");
    let header: Value =
        serde_json::from_str(String::from_utf8_lossy(&first.get_output().stdout).lines().next().unwrap()).unwrap();
    assert_eq!(header["run"]["memory"], serde_json::json!({"kind": "throw-away"}));
    assert!(!p.home.join("memory.db").exists(), "the home's memory is not touched");
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0, "the throw-away memory is removed");

    // --memory FILE keeps it: a second run recalls the first at once.
    let db = p.root.path().join("kept/chat.db");
    let db_arg = db.to_str().unwrap();
    let first = run(&["--memory", db_arg]);
    assert_eq!(turn_lines(&first)[0]["memories"], serde_json::json!([]));
    let second = run(&["--memory", db_arg]);
    let recalled = &turn_lines(&second)[0]["memories"];
    assert_eq!(recalled[0]["content"], "my cat is called Tom", "{recalled}");
    assert_eq!(recalled[0]["sources"], serde_json::json!(["default"]));
    let header: Value =
        serde_json::from_str(String::from_utf8_lossy(&second.get_output().stdout).lines().next().unwrap()).unwrap();
    assert_eq!(header["run"]["memory"], serde_json::json!({"kind": "file", "path": db_arg, "from": "--memory"}));

    // The config's `[memory] path` is used, and said so, when no --memory is given.
    write(&p.home.join("config.toml"), &format!("[memory]\npath = \"{db_arg}\"\n"));
    let text = p.cmd().args(["--plugins-dir", &plugins, "run", "--transcript"]).arg(&transcript).assert().success();
    let out = String::from_utf8_lossy(&text.get_output().stdout).into_owned();
    assert!(out.contains(&format!("\nmemory: {db_arg} ([memory] path of the config)\n")), "{out}");
    assert!(out.contains("memories:    \"my cat is called Tom\" from default"), "recalled from the kept memory: {out}");
}

#[test]
fn run_help_shows_the_memory_option_with_an_example() {
    let a = ctxhost().args(["run", "--help"]).assert().success();
    let out = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    assert!(out.contains("--memory <FILE>"), "{out}");
    assert!(out.contains("ctxhost run --transcript chat.jsonl --memory chat-memory.db"), "{out}");
    assert!(out.contains("throw-away"), "{out}");
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
