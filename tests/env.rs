//! A hook's environment: exactly the spec's variables, in the spec's order, nothing else.

use serde_json::Value;

use crate::util::{TestPlugin, reply, require_program, stderr, write};

const DUMP_PY: &str = "import json, os, sys\nsys.stdin.read()\nprint(json.dumps(dict(os.environ)))\n";
const DUMP_JS: &str = "process.stdin.resume();process.stdin.on('end',()=>console.log(JSON.stringify(process.env)));\n";

fn dump_plugin(runtime: &str, script: (&str, &str), extra: &str) -> TestPlugin {
    let manifest = format!(
        "name = \"envdump\"\nversion = \"1\"\n{extra}\n[hooks]\nruntime = \"{runtime}\"\ningest = \"{}\"\nbootstrap = \"{}\"\n",
        script.0, script.0
    );
    TestPlugin::new("envdump", &[("plugin.toml", &manifest), script])
}

fn env_of(p: &TestPlugin, host_env: &[(&str, &str)], input: &str) -> (serde_json::Map<String, Value>, String) {
    let mut cmd = p.cmd();
    cmd.args(["hook", p.dir.to_str().unwrap(), "ingest"]).write_stdin(input);
    for (k, v) in host_env {
        cmd.env(k, v);
    }
    let a = cmd.assert().success();
    let Value::Object(env) = reply(&a) else { panic!("env dump is not an object") };
    (env, stderr(&a))
}

#[test]
fn a_host_secret_never_reaches_the_hook() {
    require_program("python3", "python3");
    let p = dump_plugin("python", ("hooks/env.py", DUMP_PY), "");
    let (env, _) =
        env_of(&p, &[("CTXHOST_TEST_SECRET", "s3cr3t-value"), ("AWS_SECRET_ACCESS_KEY", "s3cr3t-value")], "{}");
    assert!(!env.values().any(|v| v.as_str().is_some_and(|s| s.contains("s3cr3t"))), "{env:?}");
    assert!(!env.contains_key("CTXHOST_TEST_SECRET"));
}

#[test]
fn exactly_the_spec_variables_arrive() {
    require_program("python3", "python3");
    let p = dump_plugin(
        "python",
        ("hooks/env.py", DUMP_PY),
        "max_memory_mb = 64\n[config.model]\ntype = \"string\"\ndefault = \"small\"\n",
    );
    let (env, _) = env_of(&p, &[], r#"{"agent_id":"agent-7","message":"hello there"}"#);
    assert_eq!(env["LIBREFANG_AGENT_ID"], "agent-7");
    assert_eq!(env["LIBREFANG_MESSAGE"], "hello there");
    assert_eq!(env["LIBREFANG_RUNTIME"], "python");
    assert_eq!(env["LIBREFANG_MAX_MEMORY_MB"], "64");
    assert_eq!(env["LIBREFANG_SANDBOX"], "1");
    for (k, v) in [
        ("no_proxy", "*"),
        ("NO_PROXY", "*"),
        ("http_proxy", ""),
        ("https_proxy", ""),
        ("HTTP_PROXY", ""),
        ("HTTPS_PROXY", ""),
    ] {
        assert_eq!(env[k], v, "{k}");
    }
    assert_eq!(env["PATH"].as_str(), std::env::var("PATH").ok().as_deref());
    assert_eq!(env["HOME"].as_str(), p.home.join("hook-home").to_str(), "the hooks' HOME, inside ctxhost's home");
    let config_file = env["LIBREFANG_PLUGIN_CONFIG"].as_str().unwrap();
    assert_eq!(config_file, p.home.join("data/envdump/config.json").to_str().unwrap());
    let config: Value = serde_json::from_str(&std::fs::read_to_string(config_file).unwrap()).unwrap();
    assert_eq!(config, serde_json::json!({"model": "small"}));

    // Nothing else: the only other names are TMPDIR and what python itself sets.
    let mut rest: Vec<&str> = env
        .keys()
        .map(String::as_str)
        .filter(|k| !k.starts_with("LIBREFANG_") && !k.ends_with("_proxy") && !k.ends_with("_PROXY"))
        .filter(|k| !["PATH", "HOME", "TMPDIR", "LC_CTYPE"].contains(k))
        .collect();
    rest.sort();
    assert!(rest.is_empty(), "unexpected variables: {rest:?}");
}

#[test]
fn allow_network_drops_the_proxy_variables_and_sandbox_flag() {
    require_program("python3", "python3");
    let p = dump_plugin("python", ("hooks/env.py", DUMP_PY), "allow_network = true");
    let (env, _) = env_of(&p, &[], "{}");
    assert!(!env.contains_key("LIBREFANG_SANDBOX") && !env.contains_key("no_proxy"), "{env:?}");
    assert!(!env.contains_key("LIBREFANG_PLUGIN_CONFIG"), "no [config], no config file");
    assert_eq!(env["LIBREFANG_AGENT_ID"], "");
}

#[test]
fn env_table_expansion_and_precedence() {
    require_program("python3", "python3");
    let p = dump_plugin(
        "python",
        ("hooks/env.py", DUMP_PY),
        "[env]\nFROM_HOST = \"${CTXHOST_T_VALUE}\"\nMISSING = \"${CTXHOST_T_MISSING}\"\nLITERAL = \"a ${B}\"\nPYTHONPATH = \"/from/env/table\"\n",
    );
    // `${VAR}` reads only what the operator allowed.
    write(&p.home.join("config.toml"), "allowed_env_vars = [\"CTXHOST_T_VALUE\", \"CTXHOST_T_MISSING\"]\n");
    let (env, err) = env_of(&p, &[("CTXHOST_T_VALUE", "expanded"), ("PYTHONPATH", "/from/host")], "{}");
    assert_eq!(env["FROM_HOST"], "expanded");
    assert_eq!(env["MISSING"], "");
    assert_eq!(env["LITERAL"], "a ${B}");
    assert_eq!(env["PYTHONPATH"], "/from/env/table", "[env] comes after the runtime passthrough");
    assert!(err.contains("host variable `CTXHOST_T_MISSING` is not set"), "{err}");
}

#[test]
fn passthrough_variables_are_per_runtime() {
    require_program("python3", "python3");
    require_program("node", "nodejs");
    let host =
        [("PYTHONPATH", "/py/lib"), ("PYTHONIOENCODING", "utf-8"), ("NODE_PATH", "/node/lib"), ("GOPATH", "/go")];
    let py = dump_plugin("python", ("hooks/env.py", DUMP_PY), "");
    let (env, _) = env_of(&py, &host, "{}");
    assert_eq!((env["PYTHONPATH"].as_str(), env["PYTHONIOENCODING"].as_str()), (Some("/py/lib"), Some("utf-8")));
    assert!(!env.contains_key("NODE_PATH") && !env.contains_key("GOPATH"));

    let js = dump_plugin("node", ("hooks/env.js", DUMP_JS), "");
    let (env, _) = env_of(&js, &host, "{}");
    assert_eq!(env["NODE_PATH"], "/node/lib");
    assert_eq!(env["LIBREFANG_RUNTIME"], "node");
    assert!(!env.contains_key("PYTHONPATH") && !env.contains_key("GOPATH"));
}

#[test]
fn allowed_env_vars_and_config_overrides_come_from_config_toml() {
    require_program("python3", "python3");
    let p = dump_plugin(
        "python",
        ("hooks/env.py", DUMP_PY),
        "[config.size]\ntype = \"number\"\ndefault = 10\n[config.name]\ntype = \"string\"\n",
    );
    write(
        &p.home.join("config.toml"),
        "allowed_env_vars = [\"CTXHOST_T_ALLOWED\"]\n[plugin_config.envdump]\nsize = 20\nname = \"n\"\nbogus = 1\n",
    );
    let (env, err) = env_of(&p, &[("CTXHOST_T_ALLOWED", "yes"), ("CTXHOST_T_OTHER", "no")], "{}");
    assert_eq!(env["CTXHOST_T_ALLOWED"], "yes");
    assert!(!env.contains_key("CTXHOST_T_OTHER"));
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(env["LIBREFANG_PLUGIN_CONFIG"].as_str().unwrap()).unwrap())
            .unwrap();
    assert_eq!(config, serde_json::json!({"name": "n", "size": 20}));
    assert!(err.contains("config override `bogus` is not declared"), "{err}");
}
