//! Launchers: found once, and version-manager shims seen through and cached.

use std::os::unix::fs::PermissionsExt;

use crate::util::{TestPlugin, reply, require_program, write};

fn real_python() -> String {
    let out = std::process::Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[test]
fn a_pyenv_style_shim_is_resolved_once_and_then_cached() {
    require_program("python3", "python3");
    let python = real_python();
    let p = TestPlugin::new(
        "shimmed",
        &[
            ("plugin.toml", "name = \"shimmed\"\nversion = \"1\"\n[hooks]\ningest = \"hooks/who.py\"\n"),
            ("hooks/who.py", "import json, sys\nprint(json.dumps({\"exe\": sys.executable}))\n"),
        ],
    );
    let shims = p.root.path().join("pyenv/shims");
    let log = p.root.path().join("shim-starts.log");
    let shim = shims.join("python3");
    write(
        &shim,
        &format!("#!/bin/sh\n# pyenv shim (test double)\necho start >> {}\nexec {python} \"$@\"\n", log.display()),
    );
    std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:/usr/bin:/bin", shims.display());
    let starts = || std::fs::read_to_string(&log).unwrap_or_default().lines().count();

    for run in 1..=3 {
        let a = p.cmd().env("PATH", &path).args(["hook", p.dir.to_str().unwrap(), "ingest"]).write_stdin("{}").assert();
        assert_eq!(reply(&a.success())["exe"], python.as_str(), "run {run} used the real interpreter");
        assert_eq!(starts(), 1, "the shim ran once, to resolve; run {run} came from the cache");
    }

    // A new version file next to the plugin invalidates the cached answer.
    write(&p.dir.join(".python-version"), "system\n");
    p.cmd().env("PATH", &path).args(["hook", p.dir.to_str().unwrap(), "ingest"]).write_stdin("{}").assert().success();
    assert_eq!(starts(), 2);
}

#[test]
fn a_missing_launcher_fails_the_call_with_the_install_hint() {
    let p = TestPlugin::new(
        "needsv",
        &[
            (
                "plugin.toml",
                "name = \"needsv\"\nversion = \"1\"\n[hooks]\nruntime = \"vlang\"\ningest = \"hooks/x.v\"\n",
            ),
            ("hooks/x.v", "fn main() {}\n"),
        ],
    );
    let a = p.cmd().env("PATH", "/usr/bin:/bin").args(["hook", p.dir.to_str().unwrap(), "ingest"]).assert();
    let err = String::from_utf8_lossy(&a.failure().get_output().stderr).into_owned();
    assert_eq!(
        err,
        "error: Runtime launcher 'v' not found on PATH: looked for v (Install V from https://vlang.io/#install (`v` must be on PATH))\n"
    );
}

#[test]
fn a_custom_launcher_path_relative_to_the_plugin() {
    let p = TestPlugin::new(
        "custom",
        &[
            (
                "plugin.toml",
                "name = \"custom\"\nversion = \"1\"\n[hooks]\nruntime = \"./bin/run\"\ningest = \"hooks/x.txt\"\n",
            ),
            ("bin/run", "#!/bin/sh\necho \"{\\\"script\\\":\\\"$1\\\",\\\"runtime\\\":\\\"$LIBREFANG_RUNTIME\\\"}\"\n"),
            ("hooks/x.txt", "data"),
        ],
    );
    std::fs::set_permissions(p.dir.join("bin/run"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let r = reply(&p.hook("ingest", "{}").success());
    let dir = p.dir.canonicalize().unwrap();
    assert_eq!(r["script"], dir.join("hooks/x.txt").to_str().unwrap());
    assert_eq!(r["runtime"], "./bin/run", "LIBREFANG_RUNTIME is the tag as written");
}

#[test]
fn native_scripts_run_directly_or_through_their_shebang() {
    let p = TestPlugin::new(
        "nat",
        &[
            ("plugin.toml", "name = \"nat\"\nversion = \"1\"\n[hooks]\nruntime = \"exec\"\ningest = \"hooks/h\"\n"),
            ("hooks/h", "#!/bin/sh\necho '{\"via\":\"shebang\"}'\n"),
        ],
    );
    assert_eq!(reply(&p.hook("ingest", "{}").success()), serde_json::json!({"via": "shebang"}));
    std::fs::write(p.dir.join("hooks/h"), "no shebang and not executable").unwrap();
    let a = p.hook("ingest", "{}").failure();
    let err = String::from_utf8_lossy(&a.get_output().stderr).into_owned();
    assert!(err.contains("is neither executable nor a script with a `#!` line"), "{err}");
}
