//! The plugin catalog: one truth about each plugin. `ctxhost doctor`,
//! `ctxhost plugin list`, `GET /api/plugins`, the daemon's doctor route and
//! the agent-loop lists agree on the state and error of the same broken
//! plugins; a misspelt hook key is an error; a plugin in both the context
//! stack and the agent loop is loaded once.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::util::http::Daemon;
use crate::util::site::Site;
use crate::util::{require_program, write};

/// A FaustBot plugin: plugin.json and impl.py.
fn faust(site: &Site, name: &str, impl_py: &str) {
    let pj = json!({"id": name, "name": name, "version": "0.1.0", "entry": "impl.py"});
    write(&site.plugin_dir(name).join("plugin.json"), &pj.to_string());
    write(&site.plugin_dir(name).join("impl.py"), impl_py);
}

/// A plugin.toml plugin whose `tool_call_pre` passes (an agent-loop plugin).
fn guard(site: &Site, name: &str, hooks: &str) {
    write(
        &site.plugin_dir(name).join("plugin.toml"),
        &format!("name = \"{name}\"\nversion = \"1.2.3\"\n[hooks]\n{hooks}"),
    );
    write(&site.plugin_dir(name).join("hooks/pass.sh"), "cat >/dev/null\necho '{\"action\":\"pass\"}'\n");
}

/// `name` → (`state`, `error`) of a list of plugin entries.
fn states(list: &Value) -> BTreeMap<String, (String, Option<String>)> {
    list.as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"))
        .iter()
        .map(|p| {
            let name = p["name"].as_str().or_else(|| p["id"].as_str()).unwrap_or("?").to_owned();
            let state = p["state"].as_str().unwrap_or_else(|| panic!("no state: {p}")).to_owned();
            (name, (state, p["error"].as_str().map(str::to_owned)))
        })
        .collect()
}

/// What each plugin must show: its state and a piece of its error.
const EXPECTED: &[(&str, &str, &[&str])] = &[
    ("badimport", "error", &["No module named 'ctxhost_catalog_no_such_module'"]),
    ("good", "loaded", &[]),
    ("noruntime", "error", &["/nonexistent/ctxhost-catalog-launcher"]),
    ("off", "disabled", &[]),
    ("syntax", "error", &["SyntaxError"]),
    ("typo", "error", &["key `hooks.ingset`", "did you mean `ingest`?"]),
];

fn check(surface: &str, got: &BTreeMap<String, (String, Option<String>)>, names: &[&str]) {
    for (name, state, fragments) in EXPECTED.iter().filter(|(n, _, _)| names.contains(n)) {
        let (got_state, error) = got.get(*name).unwrap_or_else(|| panic!("{surface}: {name} is not listed: {got:?}"));
        assert_eq!(got_state, state, "{surface}: {name}: {error:?}");
        match (fragments.is_empty(), error) {
            (true, None) => {}
            (true, Some(e)) => panic!("{surface}: {name} has an error: {e}"),
            (false, None) => panic!("{surface}: {name} has no error"),
            (false, Some(e)) => {
                for f in *fragments {
                    assert!(e.contains(f), "{surface}: {name}: {f:?} not in {e}");
                }
            }
        }
    }
}

/// One home, five plugins that would not run as expected — a FaustBot
/// syntax error, a FaustBot failing import, a missing launcher, a misspelt
/// hook key, a disabled plugin — and a good one. Every surface gives each
/// the same state and error; `doctor` exits 1 naming each broken one.
#[test]
fn doctor_list_and_the_daemon_agree_on_each_plugin() {
    require_program("python3", "python3");
    let site = Site::new();
    faust(
        &site,
        "syntax",
        "from faust_backend.plugin_system import FaustPlugin\n\n\nclass Plugin(FaustPlugin)\n    pass\n",
    );
    faust(
        &site,
        "badimport",
        "import ctxhost_catalog_no_such_module\nfrom faust_backend.plugin_system import FaustPlugin\n\n\n\
         class Plugin(FaustPlugin):\n    pass\n",
    );
    guard(
        &site,
        "noruntime",
        "runtime = \"/nonexistent/ctxhost-catalog-launcher\"\ntool_call_pre = \"hooks/pass.sh\"\n",
    );
    guard(&site, "typo", "runtime = \"bash\"\ntool_call_pre = \"hooks/pass.sh\"\ningset = \"hooks/pass.sh\"\n");
    guard(&site, "off", "runtime = \"bash\"\ntool_call_pre = \"hooks/pass.sh\"\n");
    guard(&site, "good", "runtime = \"bash\"\ntool_call_pre = \"hooks/pass.sh\"\n");
    site.ctxhost(&["plugin", "disable", "off"]);
    let all: Vec<&str> = EXPECTED.iter().map(|(n, _, _)| *n).collect();
    let cli = |args: &[&str]| crate::util::ctxhost().arg("--home").arg(site.home()).args(args).output().unwrap();

    // doctor: exit 1, each broken one named with its error.
    let out = cli(&["doctor", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let doctor = states(&report["plugins"]);
    check("ctxhost doctor --json", &doctor, &all);
    let noruntime = report["plugins"].as_array().unwrap().iter().find(|p| p["name"] == "noruntime").unwrap();
    assert_eq!((&noruntime["runtime_available"], &noruntime["kind"]), (&json!(false), &json!("script")), "{noruntime}");
    let syntax = report["plugins"].as_array().unwrap().iter().find(|p| p["name"] == "syntax").unwrap();
    assert_eq!((&syntax["kind"], &syntax["runtime_available"]), (&json!("faustbot"), &json!(true)), "{syntax}");
    let out = cli(&["doctor"]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    for (name, state, _) in EXPECTED {
        let line =
            text.lines().find(|l| l.trim_start().starts_with(&format!("{name} "))).unwrap_or_else(|| panic!("{text}"));
        let shown = match *state {
            "error" => "error: ",
            "disabled" => "disabled",
            _ => " ok",
        };
        assert!(line.contains(shown), "{name}: {line}");
    }

    // plugin list: the same states, the very same errors.
    let out = cli(&["plugin", "list", "--json"]);
    assert!(out.status.success());
    let list = states(&serde_json::from_slice(&out.stdout).unwrap());
    check("ctxhost plugin list --json", &list, &all);
    assert_eq!(list, doctor, "plugin list and doctor disagree");

    // A misspelt hook key fails a call as it fails the reports.
    let out = cli(&["hook", "typo", "tool_call_pre"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("did you mean `ingest`?"), "{out:?}");

    // The daemon: the FaustBot plugins fail when they start; the rest as the CLI said.
    let d = Daemon::start(site.home(), &[], &[]);
    let api = states(&d.get("/api/plugins").json());
    check("GET /api/plugins", &api, &all);
    for name in ["noruntime", "typo", "off", "good"] {
        assert_eq!(api[name], doctor[name], "GET /api/plugins and doctor disagree on {name}");
    }
    let report = d.get("/api/plugins/doctor").json();
    assert_eq!(states(&report["plugins"]), api, "the doctor route and GET /api/plugins disagree");
    // The agent-loop lists: every plugin that asked for the loop, but the disabled one.
    let in_loop = ["badimport", "good", "noruntime", "syntax", "typo"];
    let agent = states(&d.get("/api/agent/plugins").json());
    check("GET /api/agent/plugins", &agent, &in_loop);
    assert!(!agent.contains_key("off"), "{agent:?}");
    let admin = d.get("/faust/admin/plugins").json();
    let admin = states(&admin["items"]);
    check("GET /faust/admin/plugins", &admin, &in_loop);
    for name in in_loop {
        assert_eq!(agent[name], api[name], "the agent list and GET /api/plugins disagree on {name}");
        assert_eq!(admin[name], api[name], "the FaustBot list and GET /api/plugins disagree on {name}");
    }
    // The good one runs, in the loop.
    let r = d.post("/api/agent-hooks/tool_call_pre", &json!({"name": "x", "args": {"a": 1}}).to_string());
    assert_eq!((r.status, r.json()), (200, json!({"value": {"a": 1}})));
    assert!(d.stop().0);
}

/// A component and a persistent worker, each in the context stack and the
/// agent loop: each is loaded once (one compile and `describe` of the
/// component — a compile cache others may write is refused with one warning
/// per compile —, one worker process answering both engines).
#[test]
fn a_plugin_in_the_stack_and_the_agent_loop_is_loaded_once() {
    require_program("python3", "python3");
    let site = Site::new();
    crate::util::examples::copy_example("recall", &site.plugin_dir("recall"));
    // A prompt suffix puts the component in the agent loop too.
    let manifest = site.plugin_dir("recall").join("plugin.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    write(&manifest, &text.replace("runtime = \"wasm\"", "runtime = \"wasm\"\nprompt_suffix = \"Recall is on.\""));
    write(
        &site.plugin_dir("both").join("plugin.toml"),
        "name = \"both\"\nversion = \"1\"\n[hooks]\nruntime = \"python\"\npersistent_subprocess = true\n\
         max_workers = 1\ningest = \"hooks/w.py\"\ntool_call_pre = \"hooks/w.py\"\n",
    );
    write(
        &site.plugin_dir("both").join("hooks/w.py"),
        "import json, secrets, sys\ntoken = secrets.token_hex(8)\nfor line in sys.stdin:\n    \
         kind = json.loads(line).get('type')\n    if kind == 'ingest':\n        \
         out = {'type': 'ingest_result', 'memories': [{'content': token}]}\n    elif kind == 'tool_call_pre':\n        \
         out = {'action': 'replace', 'value': {'token': token}}\n    else:\n        out = {}\n    \
         sys.stdout.write(json.dumps(out) + '\\n')\n    sys.stdout.flush()\n",
    );
    write(&site.home().join("config.toml"), "[context_engine]\nplugin_stack = [\"recall\", \"both\"]\n");
    let cache = site.home().join("cache/components");
    std::fs::create_dir_all(&cache).unwrap();
    std::fs::set_permissions(&cache, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();

    let d = Daemon::start(site.home(), &[], &[]);
    let list = d.get("/api/plugins").json();
    for name in ["recall", "both"] {
        let p = list.as_array().unwrap().iter().find(|p| p["name"] == name).unwrap();
        assert_eq!(
            (&p["state"], &p["in_stack"], &p["in_agent_loop"]),
            (&json!("loaded"), &json!(true), &json!(true)),
            "{p}"
        );
    }
    let agent: Vec<Value> = d.get("/api/agent/plugins").json().as_array().unwrap().clone();
    assert!(agent.iter().any(|p| p["name"] == "recall" && p["prompt_suffix"] == "Recall is on."), "{agent:?}");
    // One worker process answers the stack's ingest and the loop's tool_call_pre.
    let r = d.post("/api/agents/a1/ingest", &json!({"message": "hello"}).to_string());
    assert_eq!(r.status, 200, "{}", r.body);
    let token = r.json()["memories"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["source"] == "both")
        .and_then(|m| m["content"].as_str().map(str::to_owned))
        .unwrap_or_else(|| panic!("no memory from both: {}", r.body));
    let r = d.post("/api/agent-hooks/tool_call_pre", &json!({"name": "x", "args": {}}).to_string());
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["value"]["token"], token, "the agent loop asked another worker than the stack");
    let (ok, stderr) = d.stop();
    assert!(ok, "{stderr}");
    let compiles = stderr.matches("not using the compile cache").count();
    assert_eq!(compiles, 1, "the component was compiled {compiles} times:\n{stderr}");
}

/// An unknown `[hooks]` key near a hook name is an error naming the key and
/// the hook; one nearer a setting, or near nothing, stays a warning.
#[test]
fn a_misspelt_hook_key_is_an_error_and_other_unknown_keys_warn() {
    let p = crate::util::TestPlugin::bash("ingest", "echo '{}'\n", "");
    let manifest = p.dir.join("plugin.toml");
    let base = std::fs::read_to_string(&manifest).unwrap();
    for (key, hook) in [("ingset", "ingest"), ("after_trun", "after_turn"), ("tool_call_pr", "tool_call_pre")] {
        write(&manifest, &format!("{base}{key} = \"hooks/ingest.sh\"\n"));
        let err = ctxhost::manifest::Manifest::load(&p.dir).map(|_| ()).unwrap_err().to_string();
        assert!(
            err.contains(&format!("key `hooks.{key}`")) && err.contains(&format!("did you mean `{hook}`?")),
            "{err}"
        );
    }
    write(&manifest, &format!("{base}hook_timeout = 3\nzzz_custom = 1\n"));
    let loaded = ctxhost::manifest::Manifest::load(&p.dir).unwrap();
    assert_eq!(
        loaded.warnings,
        [
            "unknown key `hooks.hook_timeout` is ignored; did you mean `hook_timeout_secs`?",
            "unknown key `hooks.zzz_custom` is ignored"
        ]
    );
}

/// Doctor's import of a FaustBot module runs in the plugin's sandbox: a
/// module that writes outside its own directories at import time is refused
/// (and so does not import), and nothing is written.
#[test]
fn the_import_check_runs_confined() {
    require_program("python3", "python3");
    let site = Site::new();
    let marker = site.home().join("written-by-an-import");
    faust(
        &site,
        "writer",
        &format!("open({:?}, 'w').write('x')\n\nclass Plugin:\n    pass\n", marker.display().to_string()),
    );
    let out = crate::util::ctxhost().arg("--home").arg(site.home()).args(["doctor", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stdout));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let (state, error) = states(&report["plugins"])["writer"].clone();
    assert_eq!(state, "error");
    let error = error.unwrap();
    assert!(error.contains("does not import") && error.contains("PermissionError"), "{error}");
    assert!(!marker.exists(), "the import wrote outside the plugin's directories");
}
