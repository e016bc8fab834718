//! `docs/reference/*.md` against the code: each table that can drift is
//! checked against the list the code itself uses — the hooks of `HookName`
//! and the fields the host sends, the plugin.toml and config.toml keys the
//! readers know, the routes the daemon registers — and each hook's example
//! pair is parsed with the crate's own request and reply types.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value, json};

use ctxhost::agent::decision::{Decision, Form};
use ctxhost::agent::engine::{AgentEngine, AgentPlugin, subject};
use ctxhost::protocol::{
    AfterTurnReply, AssembleReply, BootstrapReply, CompactReply, HookName, HookRequest, IngestReply, TransformReply,
};

fn reference(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/reference").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `## ` sections of a markdown text: (heading, body up to the next `## `).
fn sections(text: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        }
        if !fenced && let Some(h) = line.strip_prefix("## ") {
            out.push((h.trim().to_owned(), String::new()));
        } else if let Some((_, body)) = out.last_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    out
}

/// The part of `body` under `### <name>`, up to the next `### `.
fn subsection<'a>(body: &'a str, name: &str) -> Option<&'a str> {
    let head = format!("### {name}\n");
    let start = body.find(&head)? + head.len();
    let rest = &body[start..];
    Some(match rest.find("\n### ") {
        Some(end) => &rest[..end + 1],
        None => rest,
    })
}

/// A cell's text with one pair of backticks taken off, when it is all code.
fn code(cell: &str) -> Option<&str> {
    let c = cell.trim();
    let inner = c.strip_prefix('`')?.strip_suffix('`')?;
    (!inner.contains('`')).then_some(inner)
}

/// The rows of every table in `text` whose header's first cell is `first`:
/// each row's cells, trimmed (the header and the `---` line left out).
fn table_rows(text: &str, first: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let mut in_table = false;
    for line in text.lines() {
        let line = line.trim();
        if !line.starts_with('|') {
            in_table = false;
            continue;
        }
        let cells: Vec<String> = line.trim_matches('|').split('|').map(|c| c.trim().to_owned()).collect();
        if cells.iter().all(|c| c.chars().all(|ch| ch == '-' || ch == ':')) {
            continue;
        }
        if !in_table {
            in_table = true;
            if cells[0] == first {
                rows.push(Vec::new()); // marks the start of a wanted table
            } else {
                rows.push(vec!["\0skip".to_owned()]);
            }
            continue;
        }
        rows.push(cells);
    }
    // Keep only the rows of wanted tables.
    let mut wanted = Vec::new();
    let mut keep = false;
    for r in rows {
        if r.is_empty() {
            keep = true;
        } else if r[0] == "\0skip" {
            keep = false;
        } else if keep {
            wanted.push(r);
        }
    }
    wanted
}

/// The first cells of the `key` tables of `text`, as code.
fn documented_keys(text: &str, file: &str) -> Vec<String> {
    table_rows(text, "key")
        .iter()
        .map(|r| code(&r[0]).unwrap_or_else(|| panic!("{file}: key cell `{}` is not code", r[0])).to_owned())
        .collect()
}

/// The ```json blocks of `text`, parsed.
fn json_blocks(text: &str, what: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut block: Option<String> = None;
    for line in text.lines() {
        match (&mut block, line.trim()) {
            (None, "```json") => block = Some(String::new()),
            (Some(b), "```") => {
                out.push(
                    serde_json::from_str(b)
                        .unwrap_or_else(|e| panic!("{what}: a JSON example does not parse: {e}\n{b}")),
                );
                block = None;
            }
            (Some(b), _) => {
                b.push_str(line);
                b.push('\n');
            }
            (None, _) => {}
        }
    }
    out
}

/// The hook sections of hooks.md: headings written as `## \`name\``.
fn hook_sections() -> Vec<(String, String)> {
    sections(&reference("hooks.md"))
        .into_iter()
        .filter_map(|(h, body)| code(&h).map(|name| (name.to_owned(), body)))
        .collect()
}

#[test]
fn every_hook_has_one_section_and_every_section_names_a_hook() {
    let documented: Vec<String> = hook_sections().into_iter().map(|(name, _)| name).collect();
    for name in &documented {
        assert!(name.parse::<HookName>().is_ok(), "hooks.md has a section for `{name}`, which is not a hook");
        assert_eq!(documented.iter().filter(|n| *n == name).count(), 1, "hooks.md documents `{name}` twice");
    }
    for hook in HookName::ALL {
        assert!(documented.iter().any(|n| n == hook.as_str()), "hooks.md has no `## `{hook}`` section");
    }
}

#[test]
fn each_hooks_documented_request_fields_are_the_fields_the_host_sends() {
    for (name, body) in hook_sections() {
        let hook: HookName = name.parse().unwrap();
        let request = subsection(&body, "Request").unwrap_or_else(|| panic!("`{hook}`: no `### Request`"));
        let fields: Vec<String> = table_rows(request, "field")
            .iter()
            .map(|r| code(&r[0]).unwrap_or_else(|| panic!("`{hook}`: field cell `{}` is not code", r[0])).to_owned())
            .collect();
        assert_eq!(fields, hook.request_fields(), "`{hook}`: the Request table of hooks.md");
        if fields.is_empty() {
            assert!(request.contains("No fields besides `type`"), "`{hook}` sends no fields: say so");
        }
        if let Some(key) = subject(hook) {
            assert!(body.contains(&format!("Chain on `{key}`")), "`{hook}` is a chain on `{key}`: say so");
        }
    }
}

/// Whether `reply` is a reply the host acts on for `hook`, read the way the
/// host reads it.
fn check_reply(hook: HookName, reply: &Value) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    match hook {
        HookName::Bootstrap => BootstrapReply::from_value(reply).map(drop).map_err(|x| e(&x)),
        HookName::Ingest => match IngestReply::from_value(reply) {
            Ok(r) if !r.memories.is_empty() => Ok(()),
            Ok(_) => Err("no memory in the example".into()),
            Err(x) => Err(e(&x)),
        },
        HookName::Assemble => match AssembleReply::from_value(reply) {
            Ok(r) if !r.messages.is_empty() => Ok(()),
            Ok(_) => Err("no message in the example".into()),
            Err(x) => Err(e(&x)),
        },
        HookName::Compact => CompactReply::from_value(reply).map(drop).map_err(|x| e(&x)),
        HookName::AfterTurn => AfterTurnReply::from_value(reply).map(drop).map_err(|x| e(&x)),
        HookName::TransformToolResult => match TransformReply::from_value(reply) {
            TransformReply::Rewrite(_) => Ok(()),
            TransformReply::NoChange => Err("the example rewrites nothing".into()),
        },
        HookName::HealthCheck => match reply.get("status") {
            Some(Value::String(_)) => Ok(()),
            _ => Err("no `status` string".into()),
        },
        HookName::CallTool => match reply {
            Value::Object(m) if m.contains_key("result") || m.contains_key("error") => Ok(()),
            _ => Err("neither `result` nor `error`".into()),
        },
        HookName::Communicate => reply.is_object().then_some(()).ok_or_else(|| "not an object".into()),
        HookName::ReadSymbolic => match reply {
            Value::String(_) => Ok(()),
            Value::Object(m) if m.get("content").is_some_and(Value::is_string) => Ok(()),
            _ => Err("neither a string nor `{\"content\": string}`".into()),
        },
        HookName::Register => {
            ctxhost::manifest::AgentDecl::from_json(reply)?;
            let hooks = reply.get("hooks").and_then(Value::as_array).cloned().unwrap_or_default();
            match hooks.iter().find(|h| h.as_str().and_then(|h| h.parse::<HookName>().ok()).is_none()) {
                Some(bad) => Err(format!("`hooks` names {bad}, not a hook")),
                None => Ok(()),
            }
        }
        chain if subject(chain).is_some() => {
            let form = if matches!(chain, HookName::MessageReceived | HookName::AgentEventSent) {
                Form::StringsReplaceOrBlock
            } else {
                Form::Strict
            };
            Decision::from_reply(reply, form).map(drop).map_err(|x| e(&x))
        }
        // Replies the host ignores: any JSON will do.
        _ => Ok(()),
    }
}

#[test]
fn each_hooks_example_pair_parses_with_the_hosts_own_types() {
    for (name, body) in hook_sections() {
        let hook: HookName = name.parse().unwrap();
        let example = subsection(&body, "Example").unwrap_or_else(|| panic!("`{hook}`: no `### Example`"));
        let blocks = json_blocks(example, &format!("hooks.md `{hook}`"));
        assert_eq!(blocks.len(), 2, "`{hook}`: the example is one request and one reply");
        let (request, reply) = (&blocks[0], &blocks[1]);
        let Value::Object(map) = request else { panic!("`{hook}`: the request is not an object") };
        if hook == HookName::OnEvent {
            assert!(!map.contains_key("type"), "`on_event` has no `type` on the wire");
        } else {
            assert_eq!(map.get("type"), Some(&json!(hook.as_str())), "`{hook}`: the request's `type`");
        }
        let typed = HookRequest::from_json(hook, request.clone()).unwrap_or_else(|e| panic!("`{hook}`: {e}"));
        // The example shows every field the host sends, and nothing else.
        let Value::Object(wire) = serde_json::to_value(&typed).unwrap() else { unreachable!() };
        let shown: BTreeSet<&str> = map.keys().map(String::as_str).filter(|k| *k != "type").collect();
        let sent: BTreeSet<&str> = wire.keys().map(String::as_str).filter(|k| *k != "type").collect();
        assert_eq!(shown, sent, "`{hook}`: the example request leaves out or adds fields");
        assert_eq!(shown, hook.request_fields().iter().copied().collect(), "`{hook}`: the example's fields");
        if let Err(e) = check_reply(hook, reply) {
            panic!("`{hook}`: the example reply is not one the host acts on: {e}\n{reply}");
        }
    }
}

/// The dashboard prefills its test-hook editor from `assets/dashboard/hooks.json`:
/// each hook's request there is the example request of hooks.md, exactly.
#[test]
fn the_dashboards_example_requests_are_hooks_md_examples() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/dashboard/hooks.json");
    let shipped: Map<String, Value> = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for (name, body) in hook_sections() {
        let example = subsection(&body, "Example").unwrap();
        let request = json_blocks(example, &format!("hooks.md `{name}`")).swap_remove(0);
        assert_eq!(
            shipped.get(&name),
            Some(&request),
            "{}: `{name}` is not hooks.md's example request (copy the example's request there)",
            path.display()
        );
    }
    assert_eq!(shipped.len(), HookName::ALL.len(), "{}: one request per hook, no other", path.display());
}

/// A plugin taking every agent-loop hook that records the fields of each
/// request it gets.
struct Recorder {
    seen: Arc<Mutex<Vec<Received>>>,
}

/// A hook and the fields of its request, as a plugin received them.
type Received = (HookName, Vec<String>);

impl ctxhost::runner::Runner for Recorder {
    fn call<'a>(
        &'a self,
        request: &'a HookRequest,
        _: &'a ctxhost::runner::CallOptions,
    ) -> ctxhost::runner::BoxFuture<'a, Result<Value, ctxhost::runner::HookError>> {
        let hook = request.hook();
        let Value::Object(wire) = serde_json::to_value(request).unwrap() else { panic!("{hook}: not an object") };
        let fields = wire.keys().filter(|k| *k != "type").cloned().collect();
        self.seen.lock().unwrap().push((hook, fields));
        let reply = match hook {
            // What the plugin declares at start replaces its declarations.
            HookName::Register => json!({
                "hooks": HookName::AGENT.iter().map(|h| h.as_str()).collect::<Vec<_>>(),
                "tools": [{"name": "lookup"}],
                "schedules": [{"id": "refresh", "interval_secs": 0.05}],
                "heartbeat_secs": 0.05,
                "config": ["LIMIT:int:Limit=3"],
            }),
            HookName::CallTool => json!({"result": "done"}),
            HookName::ReadSymbolic => json!({"content": "computed"}),
            HookName::HealthCheck => json!({"status": "ok"}),
            _ => json!({"action": "pass"}),
        };
        Box::pin(async move { Ok(reply) })
    }
}

/// Drives every agent-loop hook through the engine's own entry points (the
/// ones the routes, `ctxhost run`, the services and the clock use) and
/// compares what a plugin received with `HookName::request_fields`, the
/// list hooks.md is checked against.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_agent_hook_sends_exactly_its_listed_fields() {
    use ctxhost::host::services::{CallContext, PluginServices, SharedServices};
    use ctxhost::manifest::{AgentDecl, ScheduleSpec, ToolSpec};

    let dir = tempfile::tempdir().unwrap();
    let home = ctxhost::home::Home::at(dir.path());
    let shared = SharedServices::open(&home).unwrap();
    let schema = ctxhost::manifest::schema::parse_schema(&json!(["LIMIT:int:Limit=3"])).unwrap();
    let services = Arc::new(PluginServices::open(shared.clone(), "rec", schema.clone(), Default::default()).unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let plugin = AgentPlugin {
        name: "rec".into(),
        version: "1".into(),
        order: 0,
        hooks: HookName::AGENT.into_iter().collect(),
        decl: AgentDecl {
            tools: vec![ToolSpec { name: "lookup".into(), description: String::new(), parameters: json!({}) }],
            schedules: vec![ScheduleSpec { id: "refresh".into(), interval_secs: 0.05 }],
            heartbeat_secs: Some(0.05),
            config: schema,
            ..Default::default()
        },
        runner: Arc::new(Recorder { seen: seen.clone() }),
        services: services.clone(),
        faust: None,
    };
    let engine = AgentEngine::new(vec![plugin], shared.clone(), Arc::default());
    assert!(engine.start().await.is_empty(), "register");
    engine.message_received("a1", "hi", "user", json!([])).await.unwrap();
    engine.llm_request_pre("a1", json!([])).await;
    engine.call_tool("a1", "lookup", json!({"id": 1})).await.unwrap();
    engine.agent_event_sent(json!({"type": "status"})).await;
    engine.memory_read_pre(json!("q"), json!({})).await;
    engine.memory_read_post(json!("q"), json!([])).await;
    engine.memory_write_pre(json!("c"), json!({})).await.unwrap();
    engine.memory_write_post(json!("c"), json!({}), json!("m1")).await;
    let trigger: Map<String, Value> =
        json!({"id": "t1", "type": "event", "event_name": "go"}).as_object().unwrap().clone();
    engine.create_trigger(trigger).await.unwrap().unwrap();
    assert_eq!(engine.fire_event("go", json!({})).await.len(), 1, "trigger_fire");
    engine.health().await;
    engine.communicate("rec", json!({"op": "stats"})).await.unwrap();
    services.set_config(json!({"LIMIT": 5}).as_object().unwrap()).await.unwrap();
    let ctx = CallContext::default();
    services.dispatch("vfs.write_symbolic", json!({"path": "/plugins/rec/today"}), &ctx).await.unwrap();
    shared.read_vfs("/plugins/rec/today", None).await.unwrap();
    let timers = ctxhost::agent::timers::Timers::start(&engine, Duration::from_millis(10));
    let clock = [HookName::Heartbeat, HookName::RunSchedule, HookName::ConfigChanged];
    for _ in 0..300 {
        if clock.iter().all(|h| seen.lock().unwrap().iter().any(|(s, _)| s == h)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(timers);
    engine.replace("rec", None).await;

    let seen = seen.lock().unwrap().clone();
    for hook in HookName::AGENT {
        let calls: Vec<&Vec<String>> = seen.iter().filter(|(h, _)| *h == hook).map(|(_, f)| f).collect();
        assert!(!calls.is_empty(), "`{hook}` was never called; drive it here");
        // Key order on the wire is not part of the contract (a chain puts
        // its subject last): compare the sets.
        let listed: BTreeSet<&str> = hook.request_fields().iter().copied().collect();
        for fields in calls {
            let got: BTreeSet<&str> = fields.iter().map(String::as_str).collect();
            assert_eq!(got, listed, "`{hook}`: what the plugin received");
        }
    }
}

/// The keys of plugin.toml the reader knows: top-level keys, execution
/// settings, hook paths under `[hooks]` and the fields of each table.
fn manifest_keys() -> BTreeSet<String> {
    use ctxhost::manifest::*;
    let mut keys: BTreeSet<String> = TOP_KEYS.iter().map(|k| (*k).to_owned()).collect();
    keys.extend(SETTING_KEYS.iter().map(|k| (*k).to_owned()));
    keys.extend(HookName::ALL.iter().map(|h| format!("hooks.{h}")));
    let nested: [(&str, &[&str]); 6] = [
        ("sandbox.", SANDBOX_KEYS),
        ("sandbox.dirs[].", DIR_FIELDS),
        ("config.<key>.", CONFIG_FIELDS),
        ("requires[].", REQUIRES_FIELDS),
        ("i18n.<lang>.", I18N_FIELDS),
        ("circuit_breaker.", CIRCUIT_BREAKER_FIELDS),
    ];
    for (prefix, fields) in nested {
        keys.extend(fields.iter().map(|f| format!("{prefix}{f}")));
    }
    keys
}

#[test]
fn every_manifest_key_is_documented_and_every_documented_key_exists() {
    let text = reference("manifest.md");
    let documented = documented_keys(&text, "manifest.md");
    let known = manifest_keys();
    for key in &known {
        assert!(documented.contains(key), "manifest.md has no `| `{key}` |` row");
    }
    let faust: BTreeSet<String> = ctxhost::faust::manifest::KNOWN.iter().map(|k| format!("plugin.json {k}")).collect();
    for key in &documented {
        assert!(
            known.contains(key) || faust.contains(key),
            "manifest.md documents `{key}`, which plugin.toml does not have"
        );
    }
    for key in &faust {
        assert!(documented.contains(key), "manifest.md has no `| `{key}` |` row");
    }
    for key in ctxhost::manifest::LIBREFANG_ONLY {
        assert!(text.contains(&format!("`{key}`")), "manifest.md does not name LibreFang's `{key}`");
    }
}

#[test]
fn every_config_key_is_documented_and_every_documented_key_exists() {
    let text = reference("config.md");
    let documented = documented_keys(&text, "config.md");
    let tables: BTreeSet<&str> = ctxhost::config::KEYS.iter().map(|(t, _)| *t).filter(|t| !t.is_empty()).collect();
    let mut known = BTreeSet::new();
    for (table, keys) in ctxhost::config::KEYS {
        for key in *keys {
            if table.is_empty() && tables.contains(key) {
                let heading = format!("## `[{key}]`");
                assert!(text.contains(&heading), "config.md has no `{heading}` section");
            } else if table.is_empty() {
                known.insert((*key).to_owned());
            } else {
                known.insert(format!("{table}.{key}"));
            }
        }
    }
    for key in &known {
        assert!(documented.contains(key), "config.md has no `| `{key}` |` row");
    }
    for key in &documented {
        assert!(known.contains(key), "config.md documents `{key}`, which config.toml does not have");
    }
}

/// `(METHOD, path)` of every `.route(path, get(…).put(…))` the daemon's
/// router registers, read from its source.
fn registered_routes() -> BTreeSet<(String, String)> {
    let file: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/server/mod.rs");
    let source = std::fs::read_to_string(&file).unwrap();
    let mut routes = BTreeSet::new();
    for piece in source.split(".route(\"").skip(1) {
        let (path, rest) = piece.split_once('"').unwrap();
        let call = rest.split(")\n").next().unwrap_or(rest);
        for method in ["get", "post", "put", "patch", "delete"] {
            let plain = call.starts_with(&format!(", {method}("));
            if plain || call.contains(&format!(".{method}(")) {
                routes.insert((method.to_uppercase(), path.to_owned()));
            }
        }
    }
    assert!(routes.len() > 20, "found only {} routes in {}: has the router moved?", routes.len(), file.display());
    routes
}

/// The short route list of `ctxhost serve --help` is written by hand: each
/// route it names must be one the router has.
#[test]
fn every_route_serve_help_names_exists() {
    let a = crate::util::ctxhost().args(["serve", "--help"]).assert().success();
    let help = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    let registered = registered_routes();
    let mut named = 0;
    for line in help.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        for pair in words.windows(2) {
            let method = pair[0];
            if ["GET", "POST", "PUT", "PATCH", "DELETE"].contains(&method) && pair[1].starts_with('/') {
                let path = pair[1].trim_end_matches(',');
                named += 1;
                assert!(
                    registered.contains(&(method.to_owned(), path.to_owned())),
                    "`ctxhost serve --help` names {method} {path}, which the router does not have:\n{help}"
                );
            }
        }
    }
    assert!(named >= 5, "found {named} routes in:\n{help}");
}

#[test]
fn every_route_is_documented_and_every_documented_route_exists() {
    let documented: BTreeSet<(String, String)> = sections(&reference("routes.md"))
        .iter()
        .flat_map(|(_, body)| {
            body.lines().filter_map(|l| l.strip_prefix("### ")).map(str::to_owned).collect::<Vec<_>>()
        })
        .filter_map(|h| {
            let (method, path) = code(&h)?.split_once(' ')?;
            Some((method.to_owned(), path.to_owned()))
        })
        .collect();
    let registered = registered_routes();
    for r in &registered {
        assert!(documented.contains(r), "routes.md has no `### `{} {}`` section", r.0, r.1);
    }
    for r in &documented {
        assert!(registered.contains(r), "routes.md documents `{} {}`, which the router does not register", r.0, r.1);
    }
}

#[test]
fn the_sandbox_reference_names_every_key_that_changes_the_sandbox() {
    let text = reference("sandbox.md");
    let mut keys: Vec<String> = ctxhost::manifest::SANDBOX_KEYS.iter().map(|k| format!("sandbox.{k}")).collect();
    let config = ctxhost::config::KEYS.iter().find(|(t, _)| *t == "sandbox").map(|(_, k)| *k).unwrap();
    keys.extend(config.iter().map(|k| format!("sandbox.{k}")));
    keys.extend(
        ["allow_network", "allow_filesystem", "readable_paths", "writable_paths", "max_memory_mb", "allowed_env_vars"]
            .map(str::to_owned),
    );
    for key in keys {
        assert!(text.contains(&format!("`{key}`")), "sandbox.md does not name `{key}`");
    }
}

/// One curl example of routes.md: method, path and query, body, whether it
/// sends the token.
struct Curl {
    method: String,
    target: String,
    body: Option<String>,
    token: bool,
}

fn parse_curl(block: &str) -> Curl {
    let line = block.trim();
    assert!(line.starts_with("curl "), "not a curl line: {line}");
    let quoted = |flag: &str| {
        let rest = line.split_once(&format!("{flag} '"))?.1;
        Some(rest.split_once('\'')?.0.to_owned())
    };
    let body = quoted("-d");
    let method = match line.split_once("-X ") {
        Some((_, rest)) => rest.split_whitespace().next().unwrap().to_owned(),
        None if body.is_some() => "POST".to_owned(),
        None => "GET".to_owned(),
    };
    let url = line.split_whitespace().find(|w| w.trim_matches('\'').starts_with("localhost:4545")).unwrap();
    let target = url.trim_matches('\'').trim_start_matches("localhost:4545").to_owned();
    Curl { method, target, body, token: line.contains("Authorization: Bearer $T") }
}

/// Whether `path` is an instance of the route `pattern` (`{x}` one segment,
/// `{*x}` the rest).
fn matches_route(pattern: &str, path: &str) -> bool {
    let (p, s): (Vec<&str>, Vec<&str>) = (pattern.split('/').collect(), path.split('/').collect());
    for (i, seg) in p.iter().enumerate() {
        if seg.starts_with("{*") {
            return s.len() > i;
        }
        match s.get(i) {
            Some(x) if seg.starts_with('{') || seg == x => {}
            _ => return false,
        }
    }
    p.len() == s.len()
}

/// Every curl example of routes.md, sent to the daemon's own router in
/// document order: it uses the method and path of its section, reaches that
/// route (never the unknown-route fallback or a 405), and the section's
/// *Guarded* claim holds — without the token a guarded route answers 401,
/// an open one does not.
#[test]
fn every_curl_example_of_routes_md_reaches_its_route_and_its_guard_is_as_documented() {
    use crate::util::http::Client;
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join("plugins")).unwrap();
    let routes = crate::util::routes::InProcess::with_token(home.path(), Some("T"));
    let mut checked = 0;
    for (_, body) in sections(&reference("routes.md")) {
        for part in body.split("\n### ").skip(1) {
            let (heading, rest) = part.split_once('\n').unwrap();
            let Some((method, pattern)) = code(heading).and_then(|h| h.split_once(' ')) else { continue };
            let block = rest.split("```sh\n").nth(1).and_then(|b| b.split("```").next());
            let block = block.unwrap_or_else(|| panic!("routes.md `{method} {pattern}`: no curl example"));
            let curl = parse_curl(block);
            let what = format!("routes.md `{method} {pattern}`");
            assert_eq!(curl.method, method, "{what}: the example's method");
            let path = curl.target.split('?').next().unwrap();
            assert!(matches_route(pattern, path), "{what}: the example's path {path}");
            let guarded = rest.contains("*Guarded*");
            assert_eq!(curl.token, guarded, "{what}: the example sends the token exactly when the route is guarded");
            let bare = routes.request(method, &curl.target, curl.body.as_deref(), &[]);
            if guarded {
                assert_eq!(bare.status, 401, "{what}: guarded, yet answers {} without the token", bare.status);
            } else {
                assert_ne!(bare.status, 401, "{what}: documented as open, yet asks for the token");
            }
            let headers: &[(&str, &str)] = if curl.token { &[("Authorization", "Bearer T")] } else { &[] };
            let reply = routes.request(method, &curl.target, curl.body.as_deref(), headers);
            assert!(!reply.body.contains("no route for"), "{what}: the example hits no route: {}", reply.body);
            assert_ne!(reply.status, 405, "{what}: the route has no {method}");
            checked += 1;
        }
    }
    assert_eq!(checked, registered_routes().len(), "one example per route");
    routes.stop();
}
