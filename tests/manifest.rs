//! plugin.toml: both placements, path confinement, names, errors that name file and key.

use std::path::Path;

use ctxhost::manifest::{FailurePolicy, Manifest, Runtime};
use ctxhost::protocol::HookName;

use crate::util::{TestPlugin, write};

fn plugin(manifest: &str) -> TestPlugin {
    TestPlugin::new("demo", &[("plugin.toml", manifest), ("hooks/ingest.py", "print('{}')\n")])
}

fn load_err(p: &TestPlugin) -> String {
    Manifest::load(&p.dir).expect_err("manifest should be refused").to_string()
}

fn file_of(p: &TestPlugin) -> String {
    p.dir.join("plugin.toml").display().to_string()
}

#[test]
fn settings_at_the_top_level() {
    let p = plugin(
        "name = \"demo\"\nversion = \"1\"\nruntime = \"node\"\nhook_timeout_secs = 7\non_hook_failure = \"abort\"\n\
         [hooks]\ningest = \"hooks/ingest.py\"\n",
    );
    let loaded = Manifest::load(&p.dir).unwrap();
    let s = &loaded.manifest.settings;
    assert_eq!((s.runtime.clone(), s.hook_timeout_secs, s.on_hook_failure), (Runtime::Node, 7, FailurePolicy::Abort));
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
}

#[test]
fn settings_in_hooks_and_hooks_wins_with_a_warning() {
    let p = plugin(
        "name = \"demo\"\nversion = \"1\"\nhook_timeout_secs = 7\n\
         [hooks]\nruntime = \"ruby\"\nhook_timeout_secs = 9\ningest = \"hooks/ingest.py\"\n",
    );
    let loaded = Manifest::load(&p.dir).unwrap();
    assert_eq!(loaded.manifest.settings.runtime, Runtime::Ruby);
    assert_eq!(loaded.manifest.settings.hook_timeout_secs, 9);
    assert_eq!(
        loaded.warnings,
        ["`hook_timeout_secs` is set both at the top level and in [hooks]; using the [hooks] value"]
    );
}

#[test]
fn defaults_follow_the_spec() {
    let p = plugin("name = \"demo\"\nversion = \"1\"\n[hooks]\ningest = \"hooks/ingest.py\"\n");
    let m = Manifest::load(&p.dir).unwrap().manifest;
    let s = &m.settings;
    assert_eq!(s.runtime, Runtime::Python);
    assert_eq!((s.hook_timeout_secs, s.max_retries, s.retry_delay_ms), (30, 0, 500));
    assert_eq!((s.allow_network, s.allow_filesystem, s.persistent_subprocess), (false, false, false));
    assert_eq!((s.circuit_breaker.max_failures, s.circuit_breaker.reset_secs), (5, 60));
    assert_eq!((s.after_turn_queue_depth, s.max_workers, s.worker_idle_secs), (16, 1, 300));
    assert_eq!(m.hooks[&HookName::Ingest].path, p.dir.canonicalize().unwrap().join("hooks/ingest.py"));
}

#[test]
fn every_documented_key_is_read() {
    let p = TestPlugin::new(
        "full",
        &[
            (
                "plugin.toml",
                r#"
name = "full"
version = "0.2.0"
description = "d"
author = "a"
requirements = "requirements.txt"
librefang_min_version = "2026.4.0"
plugin_depends = ["other"]

[env]
LITERAL = "x ${NOT_EXPANDED}"

[config.model]
type = "string"
default = "small"
description = "model size"

[[requires]]
binary = "ffmpeg"
install_hint = "apt install ffmpeg"

[i18n.zh]
name = "全"

[integrity]
"hooks/ingest.py" = "HASH"

[hooks]
ingest = "hooks/ingest.py"
on_event = "hooks/ingest.py"
max_retries = 2
retry_delay_ms = 10
ingest_filter = "remember"
ingest_regex = "^re"
only_for_agent_ids = ["a1"]
allow_network = true
allow_filesystem = true
max_memory_mb = 128
persistent_subprocess = true
hook_cache_ttl_secs = 5
assemble_cache_ttl_secs = 6
compact_cache_ttl_secs = 7
circuit_breaker = { max_failures = 3, reset_secs = 10 }
after_turn_queue_depth = 4
max_workers = 2
prewarm_subprocesses = true
worker_idle_secs = 9
worker_protocol = "jsonrpc"
readable_paths = ["/opt/data"]
writable_paths = ["/var/tmp/x"]
priority = 5
"#,
            ),
            ("hooks/ingest.py", "print('{}')\n"),
            ("requirements.txt", ""),
        ],
    );
    write(&p.dir.parent().unwrap().join("other/plugin.toml"), "name = \"other\"\nversion = \"1\"\n");
    let hash = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(b"print('{}')\n"))
    };
    let toml = std::fs::read_to_string(p.dir.join("plugin.toml")).unwrap().replace("HASH", &hash);
    std::fs::write(p.dir.join("plugin.toml"), toml).unwrap();

    let loaded = Manifest::load(&p.dir).unwrap();
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let m = loaded.manifest;
    assert_eq!(m.env["LITERAL"], "x ${NOT_EXPANDED}");
    assert_eq!(m.config["model"].default, Some(serde_json::json!("small")));
    assert_eq!(m.requires[0].binary, "ffmpeg");
    assert_eq!(m.i18n["zh"].name.as_deref(), Some("全"));
    assert!(m.hooks.contains_key(&HookName::OnEvent));
    let s = &m.settings;
    assert_eq!((s.max_retries, s.retry_delay_ms, s.max_memory_mb), (2, 10, Some(128)));
    assert!(s.ingest_regex.as_ref().unwrap().is_match("remember"));
    assert_eq!((s.circuit_breaker.max_failures, s.max_workers, s.priority), (3, 2, 5));
    assert_eq!(s.writable_paths, [Path::new("/var/tmp/x")]);
}

#[test]
fn unknown_keys_are_kept_and_warned_about() {
    let p = plugin(
        "name = \"demo\"\nversion = \"1\"\nhomepage = \"x\"\nruntme = \"node\"\n\
         [hooks]\ningest = \"hooks/ingest.py\"\nhook_timeout = 3\nenable_shared_state = true\n",
    );
    let loaded = Manifest::load(&p.dir).unwrap();
    assert_eq!(
        loaded.warnings,
        [
            "unknown key `homepage` is ignored",
            "unknown key `runtme` is ignored; did you mean `runtime`?",
            "key `hooks.enable_shared_state` is a LibreFang setting that ctxhost does not support; it is ignored",
            "unknown key `hooks.hook_timeout` is ignored; did you mean `hook_timeout_secs`?",
        ]
    );
    assert_eq!(loaded.manifest.unknown["homepage"].as_str(), Some("x"));
    assert_eq!(loaded.manifest.unknown["hooks"]["hook_timeout"].as_integer(), Some(3));
}

#[test]
fn dot_dot_is_denied() {
    let p = plugin("name = \"demo\"\nversion = \"1\"\n[hooks]\ningest = \"../outside.py\"\n");
    write(&p.dir.parent().unwrap().join("outside.py"), "");
    assert_eq!(
        load_err(&p),
        format!("invalid plugin manifest `{}`, key `hooks.ingest`: Path traversal denied: ../outside.py", file_of(&p))
    );
}

#[test]
fn symlink_escape_is_denied() {
    let p = plugin("name = \"demo\"\nversion = \"1\"\n[hooks]\ningest = \"hooks/link.py\"\n");
    let outside = p.root.path().join("secret.py");
    write(&outside, "print('{}')");
    std::os::unix::fs::symlink(&outside, p.dir.join("hooks/link.py")).unwrap();
    let err = load_err(&p);
    let dir = p.dir.canonicalize().unwrap();
    assert_eq!(
        err,
        format!(
            "invalid plugin manifest `{}`, key `hooks.ingest`: Hook script '{}' escapes plugin directory '{}'",
            file_of(&p),
            outside.canonicalize().unwrap().display(),
            dir.display()
        )
    );
}

#[test]
fn missing_script() {
    let p = plugin("name = \"demo\"\nversion = \"1\"\n[hooks]\nassemble = \"hooks/assemble.py\"\n");
    let dir = p.dir.canonicalize().unwrap();
    assert_eq!(
        load_err(&p),
        format!(
            "invalid plugin manifest `{}`, key `hooks.assemble`: Script not found: {}",
            file_of(&p),
            dir.join("hooks/assemble.py").display()
        )
    );
}

#[test]
fn bad_names() {
    let p = plugin("name = \"my plugin\"\nversion = \"1\"\n");
    assert_eq!(
        load_err(&p),
        format!(
            "invalid plugin manifest `{}`, key `name`: Invalid plugin name 'my plugin': must contain only ASCII \
             letters, digits, hyphens, and underscores",
            file_of(&p)
        )
    );
    let p = TestPlugin::new("bad.dir", &[("plugin.toml", "name = \"ok\"\nversion = \"1\"\n")]);
    assert!(load_err(&p).ends_with("directory name: Invalid plugin name 'bad.dir': must contain only ASCII letters, digits, hyphens, and underscores"));
}

#[test]
fn missing_required_keys_and_wrong_types() {
    let p = plugin("name = \"demo\"\n");
    assert_eq!(load_err(&p), format!("invalid plugin manifest `{}`, key `version`: missing required key", file_of(&p)));
    let p = plugin("name = \"demo\"\nversion = \"1\"\n[hooks]\nhook_timeout_secs = \"30\"\n");
    assert_eq!(
        load_err(&p),
        format!(
            "invalid plugin manifest `{}`, key `hooks.hook_timeout_secs`: invalid type: string \"30\", expected u64",
            file_of(&p)
        )
    );
    let p = plugin("name = \"demo\"\nversion = \"1\"\n[config.size]\ntype = \"integer\"\n");
    assert!(
        load_err(&p)
            .contains("key `config.size`: unknown variant `integer`, expected one of `string`, `number`, `boolean`")
    );
    let p = plugin("name = \"demo\"\nversion = \"1\"\n[hooks]\ningest_regex = \"(\"\n");
    assert!(load_err(&p).contains("key `hooks.ingest_regex`: invalid regex:"));
}

#[test]
fn bad_toml_names_the_line() {
    let p = plugin("name = \"demo\"\nversion = \"1\"\n[hooks]\ningest = hooks/ingest.py\n");
    let err = load_err(&p);
    assert!(
        err.starts_with(&format!("invalid plugin manifest `{}`: TOML parse error at line 4", file_of(&p))),
        "{err}"
    );
}

#[test]
fn unknown_runtime_falls_back_to_python_with_a_warning() {
    let p = plugin("name = \"demo\"\nversion = \"1\"\n[hooks]\nruntime = \"cobol\"\ningest = \"hooks/ingest.py\"\n");
    let loaded = Manifest::load(&p.dir).unwrap();
    assert_eq!(loaded.manifest.settings.runtime, Runtime::Python);
    assert!(
        loaded.warnings[0].starts_with("key `hooks.runtime`: Unknown plugin runtime 'cobol', falling back to 'python'")
    );
}

#[test]
fn env_expansion_warns_about_unset_variables() {
    let p = plugin(
        "name = \"demo\"\nversion = \"1\"\n[env]\nA = \"${CTXHOST_T_SET}\"\nB = \"${CTXHOST_T_UNSET}\"\nC = \"pre ${CTXHOST_T_SET}\"\n",
    );
    let env = |v: &str| (v == "CTXHOST_T_SET").then(|| "value".to_owned());
    let loaded = Manifest::load_with_env(&p.dir, &env).unwrap();
    let e = &loaded.manifest.env;
    assert_eq!((e["A"].as_str(), e["B"].as_str(), e["C"].as_str()), ("value", "", "pre ${CTXHOST_T_SET}"));
    assert!(
        loaded.warnings.contains(
            &"key `env.B`: host variable `CTXHOST_T_UNSET` is not set; the hook gets an empty value".to_owned()
        )
    );
}

#[test]
fn integrity_mismatch_and_missing_dependency() {
    let p = plugin("name = \"demo\"\nversion = \"1\"\n[integrity]\n\"hooks/ingest.py\" = \"00\"\n");
    let err = load_err(&p);
    assert!(
        err.contains(
            "key `integrity.\"hooks/ingest.py\"`: integrity check failed for 'hooks/ingest.py' (expected 00, got "
        ),
        "{err}"
    );
    let p = plugin("name = \"demo\"\nversion = \"1\"\nplugin_depends = [\"base\"]\n");
    assert!(
        load_err(&p)
            .ends_with("key `plugin_depends`: requires plugin 'base' but it is not installed. Install it first.")
    );
}

#[test]
fn name_differing_from_directory_is_warned_and_the_directory_wins() {
    let p = plugin("name = \"other\"\nversion = \"1\"\n[hooks]\ningest = \"hooks/ingest.py\"\n");
    let loaded = Manifest::load(&p.dir).unwrap();
    assert_eq!(loaded.manifest.name, "demo");
    assert_eq!(loaded.manifest.declared_name, "other");
    assert!(loaded.warnings[0].starts_with("`name` is 'other' but the directory is 'demo'"));
}
