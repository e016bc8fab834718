//! `ctxhost sidecar` driven as LibreFang drives it: the real binary, piped
//! stdin/stdout, the request lines LibreFang's sidecar client writes
//! (`serde_json::to_string(&json!({"id", "method", "params"}))`, so keys come
//! sorted), and every reply field LibreFang's serde types require.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::util::{require_program, write};

/// A hang guard, not a timing assertion: nothing here should take seconds.
const PATIENCE: Duration = Duration::from_secs(120);

/// LibreFang's agent ids are UUIDs.
const AGENT: &str = "6f9619ff-8b86-4011-b42d-00c04fc964ff";

/// A throwaway ctxhost home, plus a user HOME for LibreFang-style plugin state.
struct World {
    root: tempfile::TempDir,
}

impl World {
    fn new() -> World {
        let w = World { root: tempfile::tempdir().unwrap() };
        std::fs::create_dir_all(w.user_home()).unwrap();
        w
    }

    fn home(&self) -> PathBuf {
        self.root.path().join("ctxhost")
    }

    fn user_home(&self) -> PathBuf {
        self.root.path().join("user")
    }

    fn config(&self, toml: &str) {
        write(&self.home().join("config.toml"), toml);
    }

    /// A bash plugin whose listed hooks all run `body`.
    fn bash(&self, name: &str, hooks: &[&str], body: &str) {
        let hook_lines: String = hooks.iter().map(|h| format!("{h} = \"hook.sh\"\n")).collect();
        let manifest = format!(
            "name = \"{name}\"\nversion = \"1\"\nhook_timeout_secs = 120\n\
             # the tests' hooks write markers outside their dirs\nallow_filesystem = true\n\
             [hooks]\nruntime = \"bash\"\n{hook_lines}"
        );
        let dir = self.home().join("plugins").join(name);
        write(&dir.join("plugin.toml"), &manifest);
        write(&dir.join("hook.sh"), body);
    }

    fn fixture(&self, name: &str) {
        crate::util::librefang_fixture(name, &self.home().join("plugins"));
    }

    fn sidecar(&self) -> Sidecar {
        Sidecar::start(&self.home(), &self.user_home(), &[])
    }
}

/// A running `ctxhost sidecar` (also driven by `cluster`).
pub(crate) struct Sidecar {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
}

impl Sidecar {
    fn start(home: &Path, user_home: &Path, args: &[&str]) -> Sidecar {
        Sidecar::start_with(home, user_home, args, &[])
    }

    /// [`Sidecar::start`] with `envs` set for the sidecar.
    pub(crate) fn start_with(home: &Path, user_home: &Path, args: &[&str], envs: &[(&str, &str)]) -> Sidecar {
        let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("ctxhost"))
            .env_remove("RUST_LOG")
            .env_remove("CTXHOST_HOME")
            .env_remove("CTXHOST_PLUGINS_DIR")
            .env("HOME", user_home)
            .arg("sidecar")
            .arg("--home")
            .arg(home)
            .args(args)
            .envs(envs.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start ctxhost sidecar");
        let (tx, lines) = std::sync::mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        Sidecar { stdin: child.stdin.take(), child, lines, stderr }
    }

    pub(crate) fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    pub(crate) fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).unwrap()
    }

    /// Writes one request line, as LibreFang does (then flushes).
    pub(crate) fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin still open");
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// The next reply line; it must be one JSON object with an `id`.
    pub(crate) fn next(&self) -> Value {
        match self.lines.recv_timeout(PATIENCE) {
            Ok(line) => {
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}\nstderr:\n{}", self.stderr()));
                assert!(v.get("id").is_some(), "reply without id: {line}");
                assert!(
                    v.get("ok").is_some() != v.get("error").is_some(),
                    "a reply has exactly one of ok/error: {line}"
                );
                v
            }
            Err(RecvTimeoutError::Timeout) => panic!("no reply within {PATIENCE:?}; stderr:\n{}", self.stderr()),
            Err(RecvTimeoutError::Disconnected) => panic!("stdout closed; stderr:\n{}", self.stderr()),
        }
    }

    /// Sends a request and returns its `ok`, failing on an error reply.
    fn ok(&mut self, line: &str) -> Value {
        let id = serde_json::from_str::<Value>(line).unwrap()["id"].clone();
        self.send(line);
        let reply = self.next();
        assert_eq!(reply["id"], id, "{reply}");
        assert!(reply.get("error").is_none(), "{line}\n-> {reply}\nstderr:\n{}", self.stderr());
        reply["ok"].clone()
    }

    /// Closes stdin and waits for the exit; returns the status and the
    /// reply lines not read yet.
    fn finish(mut self) -> (ExitStatus, Vec<Value>, String) {
        drop(self.stdin.take());
        let started = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(started.elapsed() < PATIENCE, "the sidecar did not exit after EOF; stderr:\n{}", self.stderr());
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut rest = Vec::new();
        while let Ok(line) = self.lines.recv_timeout(PATIENCE) {
            rest.push(serde_json::from_str(&line).unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}")));
        }
        (status, rest, self.stderr())
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

// ---- LibreFang's request lines ----------------------------------------------

fn bootstrap(id: u64) -> String {
    format!(
        r#"{{"id":{id},"method":"bootstrap","params":{{"context_window_tokens":200000,"max_recall_results":5,"stable_prefix_mode":false}}}}"#
    )
}

pub(crate) fn ingest(id: u64, agent: &str, message: &str) -> String {
    json!({"id": id, "method": "ingest", "params": {"agent_id": agent, "peer_id": null, "user_message": message}})
        .to_string()
}

/// A turn as LibreFang's `Message`s serialise (keys sorted, chrono timestamps).
fn user(text: &str) -> Value {
    json!({"content": text, "pinned": false, "role": "user", "timestamp": "2026-05-01T12:00:00.123456789Z"})
}

fn assistant(text: &str) -> Value {
    json!({"content": text, "pinned": false, "role": "assistant", "timestamp": "2026-05-01T12:00:01.5Z"})
}

fn after_turn(id: u64, agent: &str, messages: &[Value]) -> String {
    json!({"id": id, "method": "after_turn", "params": {"agent_id": agent, "messages": messages}}).to_string()
}

fn assemble(id: u64, messages: &[Value], window: u64, tools: &[Value]) -> String {
    json!({"id": id, "method": "assemble", "params": {
        "agent_id": AGENT,
        "context_window_tokens": window,
        "messages": messages,
        "system_prompt": "You are a helpful assistant.",
        "tools": tools,
    }})
    .to_string()
}

// ---- what LibreFang parses --------------------------------------------------

fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| {
            if [8, 13, 18, 23].contains(&i) { c == '-' } else { c.is_ascii_hexdigit() && !c.is_ascii_uppercase() }
        })
}

/// `YYYY-MM-DDTHH:MM:SS[.f]Z`: RFC 3339 in UTC.
fn is_rfc3339_utc(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19)
        && s.ends_with('Z')
        && (s.len() == 20 || (b[19] == b'.' && digits(20..s.len() - 1)))
}

/// Every field LibreFang's `MemoryFragment` requires, with its serde type.
fn check_fragment(f: &Value, agent: &str) {
    let o = f.as_object().unwrap_or_else(|| panic!("fragment is not an object: {f}"));
    for key in [
        "id",
        "agent_id",
        "content",
        "embedding",
        "metadata",
        "source",
        "confidence",
        "created_at",
        "accessed_at",
        "access_count",
        "scope",
    ] {
        assert!(o.contains_key(key), "fragment lacks `{key}`: {f}");
    }
    assert!(is_uuid(f["id"].as_str().unwrap()), "{f}");
    assert_eq!(f["agent_id"], agent, "{f}");
    assert!(f["content"].is_string(), "{f}");
    assert!(f["embedding"].is_null() || f["embedding"].is_array(), "{f}");
    assert!(f["metadata"].is_object(), "{f}");
    let sources = ["conversation", "document", "observation", "inference", "user_provided", "system"];
    assert!(sources.contains(&f["source"].as_str().unwrap()), "{f}");
    let confidence = f["confidence"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&confidence), "{f}");
    assert!(is_rfc3339_utc(f["created_at"].as_str().unwrap()), "{f}");
    assert!(is_rfc3339_utc(f["accessed_at"].as_str().unwrap()), "{f}");
    assert!(f["access_count"].is_u64(), "{f}");
    assert!(f["scope"].is_string(), "{f}");
}

fn memories(ok: &Value) -> Vec<(String, String)> {
    let list = ok["recalled_memories"].as_array().unwrap_or_else(|| panic!("no recalled_memories: {ok}"));
    list.iter()
        .map(|f| {
            (f["metadata"]["source_plugin"].as_str().unwrap().to_owned(), f["content"].as_str().unwrap().to_owned())
        })
        .collect()
}

/// LibreFang's `Message`: role system|user|assistant, content a string or
/// typed blocks, every `tool_result` with a boolean `is_error`.
fn check_message(m: &Value) {
    assert!(["system", "user", "assistant"].contains(&m["role"].as_str().unwrap_or("")), "{m}");
    match &m["content"] {
        Value::String(_) => {}
        Value::Array(blocks) => {
            for b in blocks {
                if b["type"] == "tool_result" {
                    assert!(b["is_error"].is_boolean(), "tool_result without is_error: {m}");
                    assert!(b["tool_use_id"].is_string() && b["content"].is_string(), "{m}");
                }
            }
        }
        other => panic!("content is neither text nor blocks: {other}"),
    }
}

fn is_user_turn(m: &Value) -> bool {
    m["role"] == "user"
        && match &m["content"] {
            Value::Array(blocks) => !blocks.iter().all(|b| b["type"] == "tool_result"),
            _ => true,
        }
}

// ---- tests ------------------------------------------------------------------

#[test]
fn a_librefang_style_stack_answers_in_librefang_shapes_and_recalls_what_a_turn_taught() {
    require_program("python3", "python3");
    require_program("node", "nodejs");
    let w = World::new();
    for name in ["notes", "prefs", "agentlog"] {
        w.fixture(name);
    }
    w.config("[context_engine]\nplugin_stack = [\"notes\", \"prefs\", \"agentlog\"]\nplugin_stack_weights = { agentlog = 0.5, prefs = 2.0 }\n");
    let mut s = w.sidecar();

    let ok = s.ok(&bootstrap(1));
    assert_eq!(ok["engine"], "ctxhost");
    assert_eq!(ok["plugins"], json!(["notes", "prefs", "agentlog"]));

    let ok = s.ok(&after_turn(2, AGENT, &[user("I like jazz. My garden has basil"), assistant("Nice!")]));
    assert!(ok.is_object());

    // Sent right after after_turn's reply: the plugins' after_turn still
    // runs then, and ingest waits for it.
    let ok = s.ok(&ingest(3, AGENT, "what grows in my garden?"));
    for f in ok["recalled_memories"].as_array().unwrap() {
        check_fragment(f, AGENT);
    }
    assert_eq!(
        memories(&ok),
        [
            ("default".into(), "I like jazz. My garden has basil".into()),
            ("prefs".into(), "preference: jazz".into()),
            ("notes".into(), "note: I like jazz. My garden has basil".into()),
            ("agentlog".into(), "turns so far: 1".into()),
        ]
    );
    let f = &ok["recalled_memories"][0];
    assert_eq!((f["source"].as_str(), f["scope"].as_str()), (Some("conversation"), Some("episodic")));
    let f = &ok["recalled_memories"][2];
    assert_eq!((f["source"].as_str(), f["scope"].as_str()), (Some("system"), Some("hook")));

    // The memory prefs handed back from after_turn is recalled by the host.
    let ok = s.ok(&ingest(4, AGENT, "who likes jazz"));
    assert!(memories(&ok).contains(&("prefs".into(), "likes jazz".into())), "{ok}");
    for f in ok["recalled_memories"].as_array().unwrap() {
        check_fragment(f, AGENT);
    }

    let (status, rest, stderr) = s.finish();
    assert!(status.success(), "{status}; stderr:\n{stderr}");
    assert!(rest.is_empty(), "{rest:?}");
}

#[test]
fn agent_ids_that_are_not_uuids_get_stable_uuids_and_fragments_stable_ids() {
    let w = World::new();
    w.bash(
        "facts",
        &["ingest", "after_turn"],
        r#"read -r request
case "$request" in
  *'"type":"after_turn"'*) echo '{"type":"ok","memories":[{"content":"the wifi password is tulip"}]}' ;;
  *) echo '{"type":"ingest_result","memories":[{"content":"live fact"}]}' ;;
esac
"#,
    );
    w.config("[context_engine]\nplugin = \"facts\"\n");
    let mut s = w.sidecar();
    s.ok(&after_turn(1, "agent-7", &[user("remember the wifi"), assistant("ok")]));
    let first = s.ok(&ingest(2, "agent-7", "what is the wifi password"));
    let second = s.ok(&ingest(3, "agent-7", "what is the wifi password"));
    let list = first["recalled_memories"].as_array().unwrap();
    let agent = list[0]["agent_id"].as_str().unwrap().to_owned();
    assert!(is_uuid(&agent), "{agent}");
    for f in list {
        check_fragment(f, &agent);
    }
    assert!(memories(&first).contains(&("facts".into(), "the wifi password is tulip".into())), "{first}");
    assert!(memories(&first).contains(&("facts".into(), "live fact".into())), "{first}");
    let ids = |ok: &Value| -> Vec<Value> {
        ok["recalled_memories"].as_array().unwrap().iter().map(|f| f["id"].clone()).collect()
    };
    assert_eq!(ids(&first), ids(&second), "fragment ids are stable");
    assert_eq!(second["recalled_memories"][0]["agent_id"], agent.as_str(), "the agent's UUID is stable");
}

#[test]
fn assemble_answers_librefang_messages_starting_with_the_user_and_a_recovery_stage() {
    let w = World::new();
    let mut s = w.sidecar();
    let tool_use = json!({"content": [
        {"text": "Let me look.", "type": "text"},
        {"id": "toolu_1", "input": {"q": "basil"}, "name": "search", "type": "tool_use"}
    ], "pinned": false, "role": "assistant"});
    // LibreFang writes is_error and status; an older session may lack them.
    let tool_result = json!({"content": [
        {"content": "basil: a herb", "tool_name": "search", "tool_use_id": "toolu_1", "type": "tool_result"}
    ], "pinned": false, "role": "user"});
    let history = [user("what is basil?"), tool_use, tool_result, assistant("A herb."), user("and thyme?")];

    let ok = s.ok(&assemble(1, &history, 200_000, &[]));
    let messages = ok["messages"].as_array().unwrap();
    assert_eq!(messages.len(), history.len(), "{ok}");
    messages.iter().for_each(check_message);
    assert_eq!(ok["recovery"], "None");
    assert_eq!(messages[2]["content"][0]["is_error"], false, "is_error is always written: {ok}");
    assert_eq!(messages[0]["timestamp"], "2026-05-01T12:00:00.123456789Z", "LibreFang's fields come back as sent");

    // A long history in a small window, opening with an assistant greeting.
    let mut long = vec![assistant("Welcome! How can I help?")];
    for i in 0..12 {
        long.push(user(&format!("question {i}: {}", "tell me more about herbs ".repeat(8))));
        long.push(assistant(&format!("answer {i}: {}", "herbs are plants used for flavour ".repeat(8))));
    }
    long.push(user("last question: which herb goes with tomatoes?"));
    let ok = s.ok(&assemble(2, &long, 400, &[]));
    let messages = ok["messages"].as_array().unwrap();
    messages.iter().for_each(check_message);
    assert!(is_user_turn(&messages[0]), "the window starts with a user message: {}", messages[0]);
    assert_eq!(messages.last().unwrap()["content"], "last question: which herb goes with tomatoes?");
    let removed = ok["recovery"]["AutoCompaction"]["removed"].as_u64().unwrap_or_else(|| panic!("{}", ok["recovery"]));
    assert_eq!(removed as usize, long.len() - messages.len(), "{}", ok["recovery"]);

    // Tool definitions take their share of the window, as in LibreFang.
    let tools: Vec<Value> = (0..6)
        .map(|i| {
            json!({"description": format!("tool {i}: {}", "does many useful things ".repeat(6)), "input_schema": {
                "properties": {"query": {"description": "what to look for", "type": "string"}}, "type": "object"
            }, "name": format!("tool_{i}")})
        })
        .collect();
    let with_tools = s.ok(&assemble(3, &long, 400, &tools));
    let fewer = with_tools["messages"].as_array().unwrap().len();
    assert!(fewer < messages.len(), "tools leave less room: {fewer} vs {}", messages.len());
    assert!(is_user_turn(&with_tools["messages"][0]));

    let (status, rest, stderr) = s.finish();
    assert!(status.success(), "{status}; stderr:\n{stderr}");
    assert!(rest.is_empty(), "{rest:?}");
}

#[test]
fn overlapping_requests_are_answered_by_id_as_they_finish() {
    let w = World::new();
    let flag = w.root.path().join("go");
    w.bash(
        "gate",
        &["ingest"],
        &format!(
            r#"read -r request
case "$request" in
  *'"message":"slow"'*)
    while [ ! -e '{flag}' ]; do sleep 0.02; done
    echo '{{"memories":[{{"content":"slow done"}}]}}' ;;
  *) echo '{{"memories":[{{"content":"fast done"}}]}}' ;;
esac
"#,
            flag = flag.display()
        ),
    );
    w.config("[context_engine]\nplugin = \"gate\"\n");
    let mut s = w.sidecar();
    s.send(&ingest(1, AGENT, "slow"));
    s.send(&ingest(2, AGENT, "fast"));
    // The slow call cannot finish before the flag exists, so the fast one
    // must be answered first: requests run concurrently.
    let first = s.next();
    assert_eq!(first["id"], 2, "{first}");
    assert_eq!(memories(&first["ok"]), [("gate".to_owned(), "fast done".to_owned())]);
    std::fs::write(&flag, "").unwrap();
    let second = s.next();
    assert_eq!(second["id"], 1, "{second}");
    assert_eq!(memories(&second["ok"]), [("gate".to_owned(), "slow done".to_owned())]);

    // A burst of overlapping requests: each id answered exactly once.
    for id in 100..130 {
        s.send(&ingest(id, AGENT, &format!("burst {id}")));
    }
    let mut ids: Vec<u64> = (100..130).map(|_| s.next()["id"].as_u64().unwrap()).collect();
    ids.sort_unstable();
    assert_eq!(ids, (100..130).collect::<Vec<_>>());
    let (status, rest, _) = s.finish();
    assert!(status.success());
    assert!(rest.is_empty(), "{rest:?}");
}

#[test]
fn unknown_methods_and_malformed_lines_get_errors_and_never_stop_the_sidecar() {
    let w = World::new();
    let mut s = w.sidecar();
    s.send(r#"{"id":7,"method":"compact","params":{}}"#);
    s.send("this is not json");
    s.send(r#"{"id":8,"method":"ingest","params":{"agent_id":"#);
    s.send(r#"{"id":9,"method":"ingest","params":{"agent_id":5,"peer_id":null,"user_message":"x"}}"#);
    s.send("[]");
    s.send("");
    s.send(&bootstrap(10));
    let mut replies: Vec<Value> = (0..4).map(|_| s.next()).collect();
    replies.sort_by_key(|r| r["id"].as_u64());
    let error = |i: usize| replies[i]["error"].as_str().unwrap_or_else(|| panic!("{}", replies[i])).to_owned();
    assert_eq!(replies[0]["id"], 7);
    assert!(error(0).starts_with("unknown method `compact`"), "{}", error(0));
    assert_eq!(replies[1]["id"], 8, "the id of a line that is not JSON is still read");
    assert!(error(1).contains("not JSON"), "{}", error(1));
    assert_eq!(replies[2]["id"], 9);
    assert!(error(2).starts_with("invalid params for `ingest`"), "{}", error(2));
    assert_eq!(replies[3]["id"], 10);
    assert_eq!(replies[3]["ok"]["engine"], "ctxhost", "the sidecar still answers: {}", replies[3]);
    let (status, rest, stderr) = s.finish();
    assert!(status.success(), "{status}");
    assert!(rest.is_empty(), "lines without an id get no reply: {rest:?}");
    assert!(stderr.contains("request is not JSON"), "malformed lines are logged on stderr:\n{stderr}");
}

#[test]
fn at_eof_every_request_is_answered_and_after_turn_work_settles_before_exit() {
    let w = World::new();
    let done = w.root.path().join("after-turn-done");
    w.bash(
        "slowlearner",
        &["after_turn"],
        &format!("read -r request\nsleep 0.3\ntouch '{}'\necho '{{\"type\":\"ok\"}}'\n", done.display()),
    );
    w.config("[context_engine]\nplugin = \"slowlearner\"\n");
    let mut s = w.sidecar();
    s.send(&bootstrap(1));
    s.send(&after_turn(2, AGENT, &[user("hello"), assistant("hi")]));
    s.send(&ingest(3, AGENT, "hello again"));
    let (status, rest, stderr) = s.finish();
    assert!(status.success(), "{status}; stderr:\n{stderr}");
    let mut ids: Vec<u64> = rest.iter().map(|r| r["id"].as_u64().unwrap()).collect();
    ids.sort_unstable();
    assert_eq!(ids, [1, 2, 3], "{rest:?}");
    assert!(rest.iter().all(|r| r.get("ok").is_some()), "{rest:?}");
    assert!(done.exists(), "the plugin's after_turn finished before the sidecar exited");
}

#[test]
fn sigterm_ends_the_sidecar_cleanly_while_stdin_is_still_open() {
    let w = World::new();
    let mut s = w.sidecar();
    s.ok(&bootstrap(1));
    let pid = i32::try_from(s.child.id()).unwrap();
    // SAFETY: signalling our own child, whose pid we hold (not yet reaped).
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let started = Instant::now();
    let status = loop {
        if let Some(status) = s.child.try_wait().unwrap() {
            break status;
        }
        assert!(started.elapsed() < PATIENCE, "no exit after SIGTERM; stderr:\n{}", s.stderr());
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}; stderr:\n{}", s.stderr());
}

#[test]
fn help_shows_the_librefang_configuration() {
    let out = crate::util::ctxhost().args(["sidecar", "--help"]).assert().success();
    let text = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    for needle in ["engine = \"sidecar\"", "[context_engine.sidecar]", "args = [\"sidecar\"", "Examples:"] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
}

// ---- durable after_turn -----------------------------------------------------

use ctxhost::host::store::journal::Journal;

/// The journal of a ctxhost home, for inspection.
fn journal(home: &Path) -> ctxhost::host::store::journal::SqliteJournal {
    ctxhost::host::store::journal::SqliteJournal::open(&home.join("state.db"), Default::default()).unwrap()
}

/// Lines of `file` (none when it does not exist).
fn lines(file: &Path) -> Vec<String> {
    std::fs::read_to_string(file).map(|t| t.lines().map(str::to_owned).collect()).unwrap_or_default()
}

/// The built-in memory's memories of `agent`.
fn stored_memories(home: &Path, agent: &str) -> usize {
    ctxhost::engine::default::memory::MemoryStore::open(&home.join("memory.db")).unwrap().count(agent).unwrap()
}

/// Two plugins for the kill tests, with one hook process at a time: `blocker`,
/// whose ingest holds that one slot (it touches `started`, then waits for
/// `gate`), so a turn's after_turn is journaled and answered but cannot start
/// before the kill; and `diary`, whose after_turn appends every request it
/// sees to `store` (the plugin's own store) and hands back a memory.
///
/// (A hook running when ctxhost is SIGKILLed dies with it and runs again at
/// the replay, so it may have had effects twice: delivery is at least once.
/// These tests kill before the hook starts, deterministically.)
fn kill_world(w: &World) -> (PathBuf, PathBuf, PathBuf) {
    let (started, gate, store) =
        (w.root.path().join("started"), w.root.path().join("gate"), w.root.path().join("diary.jsonl"));
    w.bash(
        "blocker",
        &["ingest"],
        &format!(
            "read -r request\ntouch '{started}'\nwhile [ ! -e '{gate}' ]; do sleep 0.02; done\necho '{{\"memories\":[]}}'\n",
            started = started.display(),
            gate = gate.display()
        ),
    );
    w.bash(
        "diary",
        &["after_turn"],
        &format!(
            "read -r request\nprintf '%s\\n' \"$request\" >> '{store}'\n\
             echo '{{\"type\":\"ok\",\"memories\":[{{\"content\":\"diary keeps the cat\"}}]}}'\n",
            store = store.display()
        ),
    );
    w.config("max_concurrent_hooks = 1\n[context_engine]\nplugin_stack = [\"blocker\", \"diary\"]\n");
    (started, gate, store)
}

#[test]
fn a_sidecar_killed_right_after_answering_after_turn_runs_the_plugins_call_at_the_next_start_exactly_once() {
    let w = World::new();
    let (started, gate, store) = kill_world(&w);
    let mut s = w.sidecar();
    s.send(&ingest(1, AGENT, "hold the only hook slot"));
    crate::util::within(60, "the blocking ingest hook", || started.exists());
    s.send(&after_turn(2, AGENT, &[user("my cat is called Miso"), assistant("Nice!")]));
    let reply = s.next();
    // LibreFang drops its engine: SIGKILL as soon as the answer is read.
    s.child.kill().unwrap();
    s.child.wait().unwrap();
    assert_eq!(reply["id"], 2, "{reply}");
    assert!(reply.get("ok").is_some(), "{reply}");

    let pending = journal(&w.home()).pending().unwrap();
    assert_eq!(pending.len(), 1, "the answered turn is in the journal: {pending:?}");
    assert_eq!((pending[0].target.as_str(), pending[0].agent.as_str()), ("diary", AGENT));
    assert!(pending[0].payload.contains("my cat is called Miso"), "{}", pending[0].payload);
    assert!(lines(&store).is_empty(), "the plugin never ran in the killed sidecar");
    assert_eq!(stored_memories(&w.home(), AGENT), 1, "the built-in memory stored the turn before the answer");

    // Open the gate so the restarted sidecar's blocker does not wait.
    std::fs::write(&gate, "").unwrap();
    let s = w.sidecar();
    crate::util::within(60, "the replayed after_turn", || stored_memories(&w.home(), AGENT) == 2);
    let (status, rest, stderr) = s.finish();
    assert!(status.success(), "{status}; stderr:\n{stderr}");
    assert!(rest.is_empty(), "{rest:?}");
    let seen = lines(&store);
    assert_eq!(seen.len(), 1, "the plugin's store has the turn exactly once: {seen:?}\nstderr:\n{stderr}");
    assert!(seen[0].contains("my cat is called Miso") && seen[0].contains(AGENT), "{}", seen[0]);
    assert!(journal(&w.home()).pending().unwrap().is_empty(), "done entries leave the journal");
    assert!(journal(&w.home()).dead().unwrap().is_empty());
    // No duplicate in the built-in memory: the turn once, the plugin's memory once.
    let memory = ctxhost::engine::default::memory::MemoryStore::open(&w.home().join("memory.db")).unwrap();
    let recalled = memory.recall(AGENT, None, "cat Miso diary keeps", 10).unwrap();
    let contents: Vec<(&str, &str)> = recalled.iter().map(|m| (m.source.as_str(), m.content.as_str())).collect();
    assert_eq!(contents.len(), 2, "{contents:?}");
    assert!(contents.contains(&("default", "my cat is called Miso")), "{contents:?}");
    assert!(contents.contains(&("diary", "diary keeps the cat")), "{contents:?}");
    assert!(stderr.contains("cut short by the end of a ctxhost process; they run again"), "{stderr}");
}

#[test]
fn a_plugin_that_keeps_failing_is_dead_lettered_after_the_retry_policy_and_others_get_each_turn_once() {
    let w = World::new();
    let (good_store, attempts) = (w.root.path().join("good.jsonl"), w.root.path().join("bad-attempts"));
    w.bash(
        "good",
        &["after_turn"],
        &format!(
            "read -r request\nprintf '%s\\n' \"$request\" >> '{}'\necho '{{\"type\":\"ok\"}}'\n",
            good_store.display()
        ),
    );
    // The breaker off, so every attempt reaches the plugin.
    let dir = w.home().join("plugins").join("bad");
    write(
        &dir.join("plugin.toml"),
        "name = \"bad\"\nversion = \"1\"\nallow_filesystem = true\ncircuit_breaker = { max_failures = 0 }\n\
         [hooks]\nruntime = \"bash\"\nafter_turn = \"hook.sh\"\n",
    );
    write(
        &dir.join("hook.sh"),
        &format!(
            "read -r request\nturn=$(printf '%s' \"$request\" | grep -o 'turn [0-9]' | head -n1)\n\
             printf '%s %s\\n' \"$(date +%s%N)\" \"$turn\" >> '{}'\necho 'the store is down' >&2\nexit 3\n",
            attempts.display()
        ),
    );
    w.config(
        "[context_engine]\nplugin_stack = [\"bad\", \"good\"]\nafter_turn_max_attempts = 3\nafter_turn_retry_ms = 100\n",
    );
    let mut s = w.sidecar();
    s.ok(&after_turn(1, AGENT, &[user("turn 1"), assistant("ok")]));
    s.ok(&after_turn(2, AGENT, &[user("turn 2"), assistant("ok")]));
    crate::util::within(60, "both of bad's turns dead-lettered", || journal(&w.home()).dead().unwrap().len() == 2);
    let ok = s.ok(&ingest(3, AGENT, "turn"));
    assert!(memories(&ok).contains(&("default".into(), "turn 2".into())), "the sidecar still answers: {ok}");
    let (status, _, stderr) = s.finish();
    assert!(status.success(), "{status}; stderr:\n{stderr}");

    let j = journal(&w.home());
    let dead = j.dead().unwrap();
    assert!(dead.iter().all(|d| d.target == "bad" && d.attempts == 3), "{dead:?}");
    assert!(dead.iter().all(|d| d.last_error.as_deref().is_some_and(|e| e.contains("exit"))), "{dead:?}");
    assert!(j.pending().unwrap().is_empty(), "good's entries are done: {:?}", j.pending());
    let good = lines(&good_store);
    assert_eq!(good.len(), 2, "good got each turn exactly once while bad was retried: {good:?}");
    assert!(good[0].contains("turn 1") != good[1].contains("turn 1"), "{good:?}");
    // Three attempts per turn, the second after >= 100 ms, the third after >= 200 ms.
    let tried = lines(&attempts);
    assert_eq!(tried.len(), 6, "{tried:?}");
    for turn in ["turn 1", "turn 2"] {
        let at: Vec<u128> =
            tried.iter().filter(|l| l.ends_with(turn)).map(|l| l.split(' ').next().unwrap().parse().unwrap()).collect();
        assert_eq!(at.len(), 3, "{turn}: {tried:?}");
        let gaps_ms = [(at[1] - at[0]) / 1_000_000, (at[2] - at[1]) / 1_000_000];
        assert!(gaps_ms[0] >= 100 && gaps_ms[1] >= 200, "{turn}: backoff doubles from 100 ms: {gaps_ms:?}");
    }
    assert!(stderr.contains("dead letter"), "{stderr}");
}

#[test]
fn the_same_memory_from_the_built_in_store_and_two_plugins_is_one_fragment_naming_all_three() {
    let w = World::new();
    for name in ["alpha", "beta"] {
        // Both plugins recall what the user said, as the built-in memory does.
        w.bash(
            name,
            &["ingest", "after_turn"],
            &format!(
                r#"read -r request
case "$request" in
  *'"type":"after_turn"'*) echo '{{"type":"ok"}}' ;;
  *) echo '{{"memories":[{{"content":"  My garden has   basil "}},{{"content":"{name} alone"}}]}}' ;;
esac
"#
            ),
        );
    }
    w.config("[context_engine]\nplugin_stack = [\"alpha\", \"beta\"]\n");
    let mut s = w.sidecar();
    s.ok(&after_turn(1, AGENT, &[user("My garden has basil"), assistant("Nice!")]));
    let ok = s.ok(&ingest(2, AGENT, "what grows in my garden?"));
    let list = ok["recalled_memories"].as_array().unwrap();
    list.iter().for_each(|f| check_fragment(f, AGENT));
    assert_eq!(
        memories(&ok),
        [
            ("default".into(), "My garden has basil".into()),
            ("alpha".into(), "alpha alone".into()),
            ("beta".into(), "beta alone".into()),
        ],
        "one fragment for the garden, the first recaller's text: {ok}"
    );
    assert_eq!(list[0]["metadata"]["sources"], json!(["default", "alpha", "beta"]));
    assert_eq!(list[1]["metadata"]["sources"], json!(["alpha"]));
    assert_eq!((list[0]["source"].as_str(), list[0]["scope"].as_str()), (Some("conversation"), Some("episodic")));
    let (status, _, stderr) = s.finish();
    assert!(status.success(), "{status}; stderr:\n{stderr}");
}

/// A history whose oldest turns no longer fit a small window.
fn long_history(greeting: Value) -> Vec<Value> {
    let mut long = vec![greeting];
    for i in 0..12 {
        long.push(user(&format!("question {i}: {}", "tell me more about herbs ".repeat(8))));
        long.push(assistant(&format!("answer {i}: {}", "herbs are plants used for flavour ".repeat(8))));
    }
    long.push(user("last question: which herb goes with tomatoes?"));
    long
}

#[test]
fn a_normal_trim_logs_no_warning_and_is_auto_compaction() {
    let w = World::new();
    let mut s = w.sidecar();
    // Opening with the assistant's greeting: the trimmed window would start
    // with an answer, so leading messages are dropped too — every iteration.
    let long = long_history(assistant("Welcome! How can I help?"));
    for id in 1..=3 {
        let ok = s.ok(&assemble(id, &long, 400, &[]));
        let removed = ok["recovery"]["AutoCompaction"]["removed"].as_u64().unwrap_or_else(|| panic!("{ok}"));
        assert_eq!(removed as usize, long.len() - ok["messages"].as_array().unwrap().len());
    }
    let (status, _, stderr) = s.finish();
    assert!(status.success(), "{status}; stderr:\n{stderr}");
    assert!(!stderr.contains("WARN"), "a normal trim is not a warning:\n{stderr}");

    // With -vv the same trim is there, at debug.
    let mut s = Sidecar::start(&w.home(), &w.user_home(), &["-vv"]);
    s.ok(&assemble(1, &long, 400, &[]));
    let (_, _, stderr) = s.finish();
    assert!(
        stderr.contains("DEBUG") && stderr.contains("leading messages so the window starts with a user message"),
        "{stderr}"
    );
}

#[test]
fn each_recovery_kind_is_reported_for_what_happened() {
    let w = World::new();
    // A plugin whose assemble keeps everything but cuts a long tool result.
    w.bash(
        "cutter",
        &["assemble"],
        r#"read -r request
case "$request" in
  *'"cut me"'*) echo '{"messages":[{"role":"user","content":"look it up"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_9","name":"search","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_9","content":"a lot…","is_error":false}]},{"role":"user","content":"cut me"}]}' ;;
  *) echo '{}' ;;
esac
"#,
    );
    w.config("[context_engine]\nplugin = \"cutter\"\n");
    let mut s = w.sidecar();

    // None: everything fits, nothing changed.
    let ok = s.ok(&assemble(1, &[user("hi"), assistant("hello"), user("how are you?")], 200_000, &[]));
    assert_eq!(ok["recovery"], "None", "{ok}");

    // AutoCompaction: the oldest messages dropped to fit.
    let long = long_history(user("first"));
    let ok = s.ok(&assemble(2, &long, 400, &[]));
    let kept = ok["messages"].as_array().unwrap().len();
    assert_eq!(ok["recovery"], json!({"AutoCompaction": {"removed": long.len() - kept}}), "{}", ok["recovery"]);

    // OverflowCompaction: what is left does not start with the user (a
    // pinned assistant message leads), so a note saying how many messages
    // were removed goes first.
    let mut pinned = assistant("House rules: answer in one sentence.");
    pinned["pinned"] = json!(true);
    let long = long_history(pinned);
    let ok = s.ok(&assemble(3, &long, 400, &[]));
    let messages = ok["messages"].as_array().unwrap();
    let removed =
        ok["recovery"]["OverflowCompaction"]["removed"].as_u64().unwrap_or_else(|| panic!("{}", ok["recovery"]));
    assert_eq!(removed as usize, long.len() - (messages.len() - 1), "the note is not one of the given messages");
    assert!(
        messages[0]["content"]
            .as_str()
            .unwrap()
            .starts_with(&format!("[System: {removed} earlier messages were removed"))
    );
    assert_eq!(messages[1]["content"], "House rules: answer in one sentence.");

    // ToolResultTruncation: a plugin's assemble shortened a tool result.
    let call = json!({"content": [{"id": "toolu_9", "input": {}, "name": "search", "type": "tool_use"}], "pinned": false, "role": "assistant"});
    let result = json!({"content": [{"content": "a lot of text from the tool", "is_error": false, "tool_use_id": "toolu_9", "type": "tool_result"}], "pinned": false, "role": "user"});
    let ok = s.ok(&assemble(4, &[user("look it up"), call, result, user("cut me")], 200_000, &[]));
    assert_eq!(ok["recovery"], json!({"ToolResultTruncation": {"truncated": 1}}), "{ok}");
    assert_eq!(ok["messages"][2]["content"][0]["content"], "a lot…");

    // FinalError: the newest user message alone is over the window.
    let ok = s.ok(&assemble(5, &[user(&"far too long for the window ".repeat(40))], 50, &[]));
    assert_eq!(ok["recovery"], "FinalError", "{ok}");

    let (status, _, stderr) = s.finish();
    assert!(status.success(), "{status}; stderr:\n{stderr}");
    assert!(stderr.contains("told LibreFang `FinalError`"), "only the final error is a warning:\n{stderr}");
    assert_eq!(stderr.matches("WARN").count(), 1, "{stderr}");
}
