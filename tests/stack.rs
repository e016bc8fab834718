//! The engine over a stack of plugins (spec section 8): every row of the
//! stack table, failure policies, assemble repair, recall across restarts,
//! and LibreFang-style plugins that keep state under ~/.librefang/plugins/.

use std::ffi::OsString;
use std::path::PathBuf;

use ctxhost::app::load_stack;
use ctxhost::config::HostConfig;
use ctxhost::engine::stack::StackEngine;
use ctxhost::engine::{ContextEngine, EngineError};
use ctxhost::home::Home;
use ctxhost::plugin::LoadContext;
use ctxhost::protocol::{
    AfterTurnRequest, AssembleRequest, BootstrapRequest, CompactRequest, IngestRequest, Message, Role,
    TransformToolResultRequest,
};
use serde_json::json;

use crate::util::{require_program, write};

/// For hooks that write a marker into `$HOME` — the hooks' HOME inside
/// ctxhost's home, outside what the sandbox lets a hook write: the test
/// reads it, so the hook must be able to write it.
const FS_OUTSIDE: &str = "allow_filesystem = true";

/// A throwaway home (with its own user HOME for LibreFang-style state).
struct World {
    root: tempfile::TempDir,
}

impl World {
    fn new() -> World {
        let w = World { root: tempfile::tempdir().unwrap() };
        std::fs::create_dir_all(w.user_home()).unwrap();
        w
    }

    fn home(&self) -> Home {
        Home::at(self.root.path().join("ctxhost"))
    }

    fn user_home(&self) -> PathBuf {
        self.root.path().join("user")
    }

    /// The HOME hooks see.
    fn hook_home(&self) -> PathBuf {
        self.home().hook_home()
    }

    fn plugin(&self, name: &str, files: &[(&str, &str)]) {
        for (rel, content) in files {
            write(&self.home().plugins_dir().join(name).join(rel), content);
        }
    }

    /// A bash plugin whose every hook runs `body`.
    fn bash(&self, name: &str, hooks: &[&str], extra: &str, body: &str) {
        let hook_lines: String = hooks.iter().map(|h| format!("{h} = \"hook.sh\"\n")).collect();
        let manifest =
            format!("name = \"{name}\"\nversion = \"1\"\n{extra}\n[hooks]\nruntime = \"bash\"\n{hook_lines}");
        self.plugin(name, &[("plugin.toml", &manifest), ("hook.sh", body)]);
    }

    fn fixture(&self, name: &str) {
        crate::util::librefang_fixture(name, self.home().plugins_dir());
    }

    fn config(&self, toml: &str) {
        write(self.home().config_file(), toml);
    }

    fn engine(&self) -> (StackEngine, Vec<String>) {
        let home = self.home();
        let (config, _) = HostConfig::load(home.config_file()).unwrap();
        let user_home: OsString = self.user_home().into();
        let env = move |k: &str| match k {
            "HOME" => Some(user_home.clone()),
            other => std::env::var_os(other),
        };
        let cx = LoadContext { home: &home, config: &config, host_env: &env };
        load_stack(&cx).unwrap()
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn ingest(agent: &str, message: &str) -> IngestRequest {
    IngestRequest { agent_id: agent.into(), message: message.into(), ..Default::default() }
}

fn turn(agent: &str, user: &str, assistant: &str) -> AfterTurnRequest {
    AfterTurnRequest {
        agent_id: agent.into(),
        messages: vec![Message::text(Role::User, user), Message::text(Role::Assistant, assistant)],
        ..Default::default()
    }
}

fn pairs(recalled: &[ctxhost::engine::Recalled]) -> Vec<(String, String)> {
    recalled.iter().map(|r| (r.source.clone(), r.content.clone())).collect()
}

#[test]
fn what_one_turn_teaches_a_later_turn_recalls_through_librefang_style_plugins() {
    require_program("python3", "python3");
    require_program("node", "nodejs");
    let w = World::new();
    for name in ["notes", "prefs", "agentlog"] {
        w.fixture(name);
    }
    w.config("[context_engine]\nplugin_stack = [\"notes\", \"prefs\", \"agentlog\"]\nplugin_stack_weights = { agentlog = 0.5, prefs = 2.0 }\n");
    let (engine, warnings) = w.engine();
    assert!(warnings.is_empty(), "{warnings:?}");
    let rt = rt();
    rt.block_on(async {
        engine.bootstrap(&BootstrapRequest::default()).await.unwrap();
        engine.after_turn(&turn("a1", "I like jazz. My garden has basil", "Nice!")).await.unwrap();
        engine.settle().await;
        let recalled = engine.ingest(&ingest("a1", "what grows in my garden?")).await.unwrap();
        assert_eq!(
            pairs(&recalled),
            [
                ("default".into(), "I like jazz. My garden has basil".into()),
                ("prefs".into(), "preference: jazz".into()),
                ("notes".into(), "note: I like jazz. My garden has basil".into()),
                ("agentlog".into(), "turns so far: 1".into()),
            ],
            "default recall once, then plugins by weight (prefs 2.0, notes 1.0, agentlog 0.5)"
        );
        // The memory prefs handed back in after_turn went to the default store.
        let recalled = engine.ingest(&ingest("a1", "who likes jazz")).await.unwrap();
        assert!(recalled.iter().any(|r| r.source == "prefs" && r.content == "likes jazz"), "{recalled:?}");
        // Another agent sees nothing of a1's.
        let other = engine.ingest(&ingest("a2", "garden")).await.unwrap();
        assert_eq!(pairs(&other), [("agentlog".into(), "turns so far: 0".into())]);
    });
    // LibreFang's layout in the hooks' HOME, inside ctxhost's home; the
    // user's own home stays empty.
    assert!(w.home().hook_home().join(".librefang/plugins/notes/store.json").is_file());
    assert_eq!(std::fs::read_dir(w.user_home()).unwrap().count(), 0);

    // Recall across a restart of the engine: memory and plugin state persist.
    drop(engine);
    let (engine, _) = w.engine();
    rt.block_on(async {
        let recalled = engine.ingest(&ingest("a1", "garden")).await.unwrap();
        let sources: Vec<&str> = recalled.iter().map(|r| r.source.as_str()).collect();
        assert_eq!(sources, ["default", "prefs", "notes", "agentlog"]);
    });
}

#[test]
fn a_broken_layer_is_left_out_and_the_rest_works() {
    let w = World::new();
    w.bash("good", &["ingest"], "", "echo '{\"memories\":[{\"content\":\"from good\"}]}'\n");
    w.plugin("broken", &[("plugin.toml", "name = \"broken\"\nversion = \"1\"\n[hooks]\ningest = \"../escape.py\"\n")]);
    w.config("[context_engine]\nplugin_stack = [\"broken\", \"good\", \"missing\"]\n");
    let (engine, warnings) = w.engine();
    assert_eq!(engine.layer_names(), ["good"]);
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[0].starts_with("plugin 'broken' is left out of the stack: invalid plugin manifest"),
        "{warnings:?}"
    );
    let recalled = rt().block_on(engine.ingest(&ingest("a", "x"))).unwrap();
    assert_eq!(pairs(&recalled), [("good".into(), "from good".into())]);
}

#[test]
fn failure_policies_warn_skip_and_abort() {
    let w = World::new();
    for policy in ["warn", "skip", "abort"] {
        w.bash(policy, &["ingest"], &format!("on_hook_failure = \"{policy}\""), "echo broken >&2\nexit 2\n");
    }
    w.bash("ok", &["ingest"], "", "echo '{\"memories\":[{\"content\":\"fine\"}]}'\n");
    let rt = rt();
    for (stack, expect_ok) in
        [("[\"warn\", \"ok\"]", true), ("[\"skip\", \"ok\"]", true), ("[\"abort\", \"ok\"]", false)]
    {
        w.config(&format!("[context_engine]\nplugin_stack = {stack}\n"));
        let (engine, _) = w.engine();
        let result = rt.block_on(engine.ingest(&ingest("a", "x")));
        if expect_ok {
            assert_eq!(pairs(&result.unwrap()), [("ok".into(), "fine".into())], "{stack}");
        } else {
            let err = result.unwrap_err();
            assert!(matches!(err, EngineError::Plugin(_)));
            assert_eq!(
                err.to_string(),
                "plugin 'abort' failed in `ingest` (abort policy): Hook exited with exit code 2\nstderr: broken"
            );
        }
        let m = &engine.metrics().by_plugin()[stack.split('"').nth(1).unwrap()]["ingest"];
        assert_eq!((m.calls, m.failures, m.fallbacks), (1, 1, u64::from(expect_ok)));
    }
}

/// Runs `f` on this thread with a subscriber that records warnings.
fn warnings_of(f: impl FnOnce()) -> String {
    use std::sync::{Arc, Mutex};
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    tracing::subscriber::with_default(subscriber, f);
    String::from_utf8(buf.0.lock().unwrap().clone()).unwrap()
}

#[test]
fn warn_logs_the_failure_and_skip_stays_silent() {
    let w = World::new();
    for policy in ["warn", "skip"] {
        w.bash(policy, &["ingest"], &format!("on_hook_failure = \"{policy}\""), "echo broken >&2\nexit 2\n");
    }
    let current = || tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    w.config("[context_engine]\nplugin = \"warn\"\n");
    let (engine, _) = w.engine();
    let logged = warnings_of(|| drop(current().block_on(engine.ingest(&ingest("a", "x"))).unwrap()));
    assert!(logged.contains("Hook exited with exit code 2") && logged.contains("using the fallback"), "{logged}");
    w.config("[context_engine]\nplugin = \"skip\"\n");
    let (engine, _) = w.engine();
    let logged = warnings_of(|| drop(current().block_on(engine.ingest(&ingest("a", "x"))).unwrap()));
    assert_eq!(logged, "", "skip falls back silently");
}

#[test]
fn assemble_first_non_empty_reply_wins_and_is_repaired() {
    let w = World::new();
    w.bash("empty", &["assemble"], "", "echo '{\"messages\":[]}'\n");
    w.bash(
        "trim",
        &["assemble"],
        "",
        r#"echo '{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"gone","content":"x","is_error":false}]},{"role":"user","content":"latest"}]}'
"#,
    );
    w.bash("never", &["assemble"], FS_OUTSIDE, "touch \"$HOME/never-ran\"\necho '{}'\n");
    w.config("[context_engine]\nplugin_stack = [\"empty\", \"trim\", \"never\"]\n");
    let (engine, _) = w.engine();
    let mut pinned = Message::text(Role::System, "the rules");
    pinned.pinned = true;
    let request = AssembleRequest {
        agent_id: "a".into(),
        messages: vec![pinned.clone(), Message::text(Role::User, "old"), Message::text(Role::User, "latest")],
        context_window_tokens: 1000,
        ..Default::default()
    };
    let out = rt().block_on(engine.assemble(&request)).unwrap();
    assert_eq!(out, vec![pinned, Message::text(Role::User, "latest")], "orphan result dropped, pinned restored");
    assert!(!w.hook_home().join("never-ran").exists(), "the first non-empty reply ends the stack");
}

#[test]
fn assemble_and_compact_fall_back_to_the_defaults() {
    let w = World::new();
    w.bash("bad", &["assemble", "compact"], "on_hook_failure = \"skip\"", "exit 1\n");
    w.config("[context_engine]\nplugin = \"bad\"\n");
    let (engine, _) = w.engine();
    let rt = rt();
    let messages: Vec<Message> = (0..40)
        .map(|i| Message::text(if i % 2 == 0 { Role::User } else { Role::Assistant }, "word ".repeat(50)))
        .collect();
    let assembled = rt
        .block_on(engine.assemble(&AssembleRequest {
            messages: messages.clone(),
            context_window_tokens: 500,
            ..Default::default()
        }))
        .unwrap();
    assert!(!assembled.is_empty() && assembled.len() < messages.len(), "default trimming: {}", assembled.len());
    let compacted = rt
        .block_on(engine.compact(&CompactRequest { messages, context_window_tokens: 2200, ..Default::default() }))
        .unwrap();
    assert!(compacted.summary.unwrap().starts_with("[Context compaction summary]"));
}

#[test]
fn a_compact_directive_goes_to_the_summarizer() {
    let w = World::new();
    w.bash(
        "summ",
        &["compact"],
        "",
        r#"echo '{"request_llm_summary":{"summarize":[{"role":"user","content":"we planted basil"}],"keep":[{"role":"user","content":"now?"}]}}'
"#,
    );
    w.config("[context_engine]\nplugin = \"summ\"\n");
    let (engine, _) = w.engine();
    let out = rt().block_on(engine.compact(&CompactRequest::default())).unwrap();
    assert_eq!(out.messages.len(), 2);
    assert!(out.messages[0].text_content().contains("- user: we planted basil"), "{:?}", out.messages);
    assert_eq!(out.messages[1].text_content(), "now?");
}

#[test]
fn transform_first_rewrite_wins_errors_move_on() {
    let w = World::new();
    w.bash("fails", &["transform_tool_result"], "", "exit 1\n");
    w.bash("skips", &["transform_tool_result"], "", "echo '{\"type\":\"skip\"}'\n");
    w.bash("rewrites", &["transform_tool_result"], "", "echo '{\"type\":\"transformed\",\"result\":\"short\"}'\n");
    w.bash("late", &["transform_tool_result"], "", "echo '{\"content\":\"too late\"}'\n");
    w.config("[context_engine]\nplugin_stack = [\"fails\", \"skips\", \"rewrites\", \"late\"]\n");
    let (engine, _) = w.engine();
    let req = TransformToolResultRequest::new("a", "grep", "t1", json!({}), "a very long result", false);
    assert_eq!(rt().block_on(engine.transform_tool_result(&req)).unwrap(), "short");
}

#[test]
fn bootstrap_runs_every_layer_and_its_env_overrides_reach_later_calls() {
    let w = World::new();
    w.bash("first", &["bootstrap"], "", "exit 3\n");
    w.bash(
        "second",
        &["bootstrap", "ingest"],
        "[env]\nFIXED = \"plugin\"",
        r#"read -r req
case "$req" in
  *bootstrap*) echo '{"env_overrides":{"MODEL_URL":"http://x","FIXED":"bootstrap"}}' ;;
  *) echo "{\"memories\":[{\"content\":\"$MODEL_URL $FIXED\"}]}" ;;
esac
"#,
    );
    w.config("[context_engine]\nplugin_stack = [\"first\", \"second\"]\n");
    let (engine, _) = w.engine();
    let rt = rt();
    rt.block_on(engine.bootstrap(&BootstrapRequest::default())).unwrap();
    let recalled = rt.block_on(engine.ingest(&ingest("a", "x"))).unwrap();
    assert_eq!(pairs(&recalled), [("second".into(), "http://x plugin".into())], "[env] wins over overrides");
}

#[test]
fn after_turn_text_is_cut_for_plugins_and_runs_in_the_background() {
    let w = World::new();
    w.bash("rec", &["after_turn"], FS_OUTSIDE, "sleep 0.3\ncat > \"$HOME/seen.json\"\necho '{}'\n");
    w.config("[context_engine]\nplugin = \"rec\"\nafter_turn_text_limit = 5\n");
    let (engine, _) = w.engine();
    let rt = rt();
    let started = std::time::Instant::now();
    rt.block_on(engine.after_turn(&turn("a", "0123456789", "abcdefghij"))).unwrap();
    assert!(started.elapsed() < std::time::Duration::from_millis(250), "after_turn must not wait for plugins");
    rt.block_on(engine.settle());
    let seen: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(w.hook_home().join("seen.json")).unwrap()).unwrap();
    assert_eq!(seen["messages"][0]["content"], "01234");
    assert_eq!(seen["messages"][1]["content"], "abcde");
}

#[test]
fn manual_hooks_from_the_config_file_form_a_layer() {
    let w = World::new();
    write(&w.home().root().join("my-hooks/ingest.sh"), "echo '{\"memories\":[{\"content\":\"manual\"}]}'\n");
    w.config("[context_engine.hooks]\nruntime = \"bash\"\ningest = \"my-hooks/ingest.sh\"\n");
    let (engine, warnings) = w.engine();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(engine.layer_names(), ["hooks"]);
    let recalled = rt().block_on(engine.ingest(&ingest("a", "x"))).unwrap();
    assert_eq!(pairs(&recalled), [("hooks".into(), "manual".into())]);

    w.bash("p", &["ingest"], "", "echo '{}'\n");
    w.config("[context_engine]\nplugin = \"p\"\n[context_engine.hooks]\ningest = \"my-hooks/ingest.sh\"\n");
    let (engine, warnings) = w.engine();
    assert_eq!(engine.layer_names(), ["p"]);
    assert!(warnings[0].starts_with("[context_engine.hooks] is ignored"), "{warnings:?}");
}

#[test]
fn subagent_hooks_run_in_stack_order() {
    let w = World::new();
    for name in ["first", "second"] {
        let body = format!(
            "read -r r\ncase \"$r\" in *prepare_subagent*) t=prepare;; *) t=merge;; esac\n\
             echo \"{name} $t\" >> \"$HOME/order\"\necho '{{}}'\n"
        );
        w.bash(name, &["prepare_subagent", "merge_subagent"], FS_OUTSIDE, &body);
    }
    w.config("[context_engine]\nplugin_stack = [\"first\", \"second\"]\n");
    let (engine, _) = w.engine();
    let req = ctxhost::protocol::SubagentRequest { parent_id: "p".into(), child_id: "c".into(), ..Default::default() };
    let rt = rt();
    rt.block_on(engine.prepare_subagent(&req)).unwrap();
    rt.block_on(engine.merge_subagent(&req)).unwrap();
    let order = std::fs::read_to_string(w.hook_home().join("order")).unwrap();
    assert_eq!(order, "first prepare\nsecond prepare\nfirst merge\nsecond merge\n");
}

#[test]
fn max_concurrent_hooks_queues_the_calls_beyond_it() {
    let w = World::new();
    // One file per hook process, named by a token it makes (its pid is 1 of
    // its own pid namespace, the same for all three).
    let body = "read -r tok < /proc/sys/kernel/random/uuid\n\
                echo \"start $(date +%s%N)\" >> \"$HOME/$LIBREFANG_RUNTIME-$tok\"\nsleep 0.3\n\
                echo \"end $(date +%s%N)\" >> \"$HOME/$LIBREFANG_RUNTIME-$tok\"\necho '{}'\n";
    for name in ["a", "b", "c"] {
        w.bash(name, &["ingest"], FS_OUTSIDE, body);
    }
    w.config("max_concurrent_hooks = 1\n[context_engine]\nplugin_stack = [\"a\", \"b\", \"c\"]\n");
    let (engine, _) = w.engine();
    let started = std::time::Instant::now();
    rt().block_on(engine.ingest(&ingest("a", "x"))).unwrap();
    assert!(started.elapsed() >= std::time::Duration::from_millis(900), "ran concurrently: {:?}", started.elapsed());
    let mut spans: Vec<(u128, u128)> = std::fs::read_dir(w.hook_home())
        .unwrap()
        .map(|e| {
            let text = std::fs::read_to_string(e.unwrap().path()).unwrap();
            let ts: Vec<u128> = text.lines().map(|l| l.split(' ').nth(1).unwrap().parse().unwrap()).collect();
            (ts[0], ts[1])
        })
        .collect();
    spans.sort();
    assert_eq!(spans.len(), 3);
    assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0), "hook processes overlapped: {spans:?}");
}

#[test]
fn the_memory_survives_a_crash_mid_write() {
    let w = World::new();
    let transcript = w.root.path().join("long.jsonl");
    let turns: String =
        (0..5000).map(|i| format!("{{\"user\":\"note number {i} about llamas\",\"assistant\":\"ok\"}}\n")).collect();
    write(&transcript, &turns);
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("ctxhost"))
        .arg("--home")
        .arg(w.home().root())
        .args(["run", "--json", "--transcript"])
        .arg(&transcript)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Let it write for a while, then kill it without warning.
    use std::io::BufRead;
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    for _ in 0..50 {
        lines.next().unwrap().unwrap();
    }
    child.kill().unwrap();
    child.wait().unwrap();

    let db = w.home().root().join("memory.db");
    let conn = rusqlite::Connection::open(&db).unwrap();
    let check: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
    assert_eq!(check, "ok");
    let stored: i64 = conn.query_row("SELECT COUNT(*) FROM memories", [], |r| r.get(0)).unwrap();
    assert!(stored >= 50, "{stored}");
    drop(conn);
    // And the engine opens it and keeps working.
    let (engine, _) = w.engine();
    let recalled = rt().block_on(engine.ingest(&ingest("agent", "llamas"))).unwrap();
    assert_eq!(recalled.len(), 5, "max_recall_results caps the default recall");
}

#[test]
fn stable_prefix_mode_skips_recall_entirely() {
    let w = World::new();
    w.bash("p", &["ingest"], FS_OUTSIDE, "touch \"$HOME/ingest-ran\"\necho '{\"memories\":[{\"content\":\"x\"}]}'\n");
    w.config("[context_engine]\nplugin = \"p\"\nstable_prefix_mode = true\n");
    let (engine, _) = w.engine();
    let rt = rt();
    rt.block_on(engine.after_turn(&turn("a", "remember the garden", "ok"))).unwrap();
    assert!(rt.block_on(engine.ingest(&ingest("a", "garden"))).unwrap().is_empty());
    assert!(!w.hook_home().join("ingest-ran").exists());
}

#[test]
fn compact_takes_the_first_non_empty_answer() {
    let w = World::new();
    w.bash("none", &["compact"], "", "echo '{\"messages\":[]}'\n");
    w.bash(
        "short",
        &["compact"],
        "",
        "echo '{\"messages\":[{\"role\":\"user\",\"content\":\"short\"}],\"summary\":\"s\"}'\n",
    );
    w.bash(
        "late",
        &["compact"],
        "",
        "touch \"$HOME/late-ran\"\necho '{\"messages\":[{\"role\":\"user\",\"content\":\"late\"}]}'\n",
    );
    w.config("[context_engine]\nplugin_stack = [\"none\", \"short\", \"late\"]\n");
    let (engine, _) = w.engine();
    let out = rt().block_on(engine.compact(&CompactRequest::default())).unwrap();
    assert_eq!((out.messages, out.summary.as_deref()), (vec![Message::text(Role::User, "short")], Some("s")));
    assert!(!w.hook_home().join("late-ran").exists());
}

#[test]
fn ingest_runs_the_layers_concurrently() {
    let w = World::new();
    for name in ["a", "b", "c"] {
        w.bash(name, &["ingest"], "", "sleep 0.5\necho '{\"memories\":[{\"content\":\"m\"}]}'\n");
    }
    w.config("[context_engine]\nplugin_stack = [\"a\", \"b\", \"c\"]\n");
    let (engine, _) = w.engine();
    let started = std::time::Instant::now();
    let recalled = rt().block_on(engine.ingest(&ingest("x", "y"))).unwrap();
    assert_eq!(recalled.len(), 3);
    assert!(
        started.elapsed() < std::time::Duration::from_millis(1200),
        "layers ran one after another: {:?}",
        started.elapsed()
    );
}

#[test]
fn after_turn_beyond_the_queue_depth_is_not_sent() {
    let w = World::new();
    w.bash(
        "slow",
        &["after_turn"],
        "after_turn_queue_depth = 1\n# writes a marker into $HOME\nallow_filesystem = true",
        "echo run >> \"$HOME/runs\"\nsleep 0.5\necho '{}'\n",
    );
    w.config("[context_engine]\nplugin = \"slow\"\n");
    let (engine, _) = w.engine();
    let rt = rt();
    rt.block_on(async {
        engine.after_turn(&turn("a", "one", "x")).await.unwrap();
        engine.after_turn(&turn("a", "two", "x")).await.unwrap();
        engine.settle().await;
        engine.after_turn(&turn("a", "three", "x")).await.unwrap();
        engine.settle().await;
    });
    let runs = std::fs::read_to_string(w.hook_home().join("runs")).unwrap();
    assert_eq!(runs.lines().count(), 2, "the second turn found the queue full; the third ran");
}

#[test]
fn memories_can_be_keyed_by_peer() {
    let w = World::new();
    let (engine, _) = w.engine();
    let rt = rt();
    let mut about_bob = turn("a", "bob loves sailing", "ok");
    about_bob.extra.insert("peer_id".into(), json!("bob"));
    rt.block_on(engine.after_turn(&about_bob)).unwrap();
    rt.block_on(engine.after_turn(&turn("a", "everyone loves sailing trips", "ok"))).unwrap();
    let for_bob = IngestRequest { peer_id: Some("bob".into()), ..ingest("a", "sailing") };
    assert_eq!(rt.block_on(engine.ingest(&for_bob)).unwrap().len(), 2);
    let for_carol = IngestRequest { peer_id: Some("carol".into()), ..ingest("a", "sailing") };
    let recalled = rt.block_on(engine.ingest(&for_carol)).unwrap();
    assert_eq!(pairs(&recalled), [("default".into(), "everyone loves sailing trips".into())]);
}
