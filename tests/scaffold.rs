//! `ctxhost new`: every template scaffolded with the real command and run as
//! generated through `ctxhost hook` (after_turn stores what the user said,
//! ingest recalls the agent's 3 latest notes, newest first); the Rust
//! component project built with cargo; v, which no reachable registry has,
//! checked by its command line; and the refusals (existing plugin, bad name,
//! unknown runtime) leaving nothing behind.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::{Value, json};
use tempfile::TempDir;

use crate::util::{ctxhost, reply, repo_root, require_program, stderr};

/// A plugin written by `ctxhost new` into a fresh plugins dir.
struct Scaffolded {
    root: TempDir,
    plugins: PathBuf,
    home: PathBuf,
    dir: PathBuf,
}

impl Scaffolded {
    /// `ctxhost --home <home> --plugins-dir <plugins> new <name> --runtime <runtime> --json`.
    fn new(name: &str, runtime: &str) -> Scaffolded {
        let root = tempfile::tempdir().expect("temp dir");
        let plugins = root.path().join("plugins");
        let home = root.path().join("home");
        let assert = ctxhost()
            .arg("--home")
            .arg(&home)
            .arg("--plugins-dir")
            .arg(&plugins)
            .args(["new", name, "--runtime", runtime, "--json"])
            .assert()
            .success();
        let report = reply(&assert);
        let dir = plugins.join(name);
        assert_eq!(report["scaffolded"], true);
        assert_eq!(report["name"], name);
        assert_eq!(Path::new(report["path"].as_str().unwrap()), dir.canonicalize().unwrap());
        assert!(dir.join("plugin.toml").is_file() && dir.join("README.md").is_file());
        Scaffolded { root, plugins, home, dir }
    }

    /// `ctxhost hook <dir> <hook>`, with Deno's cache kept in the temp dir.
    fn hook(&self, hook: &str, input: &Value) -> assert_cmd::assert::Assert {
        ctxhost()
            .arg("--home")
            .arg(&self.home)
            .args(["hook", self.dir.to_str().unwrap(), hook])
            .env("DENO_DIR", self.root.path().join("deno"))
            .write_stdin(input.to_string())
            .assert()
    }

    fn after_turn(&self, agent: &str, messages: Value) {
        let assert = self.hook("after_turn", &json!({"agent_id": agent, "messages": messages}));
        let assert = assert.success();
        assert_eq!(reply(&assert), json!({"type": "ok"}), "stderr: {}", stderr(&assert));
    }

    fn recall(&self, agent: &str) -> Vec<String> {
        let assert = self.hook("ingest", &json!({"agent_id": agent, "message": "what do you know?"}));
        let assert = assert.success();
        let reply = reply(&assert);
        assert_eq!(reply["type"], "ingest_result", "{reply}");
        let memories = reply["memories"].as_array().unwrap_or_else(|| panic!("no memories: {reply}"));
        memories.iter().map(|m| m["content"].as_str().unwrap_or_else(|| panic!("{reply}")).to_owned()).collect()
    }

    /// The manifest as TOML, and as ctxhost loads it (no warnings allowed).
    fn check_manifest(&self, runtime: &str) {
        let text = std::fs::read_to_string(self.dir.join("plugin.toml")).unwrap();
        let table: toml::Table = toml::from_str(&text).unwrap();
        assert!(!table.contains_key("runtime"), "runtime must sit in [hooks], not at the top level:\n{text}");
        assert_eq!(table["hooks"]["runtime"].as_str(), Some(runtime), "{text}");
        let loaded = ctxhost::manifest::Manifest::load(&self.dir).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(loaded.warnings, Vec::<String>::new());
        assert_eq!(loaded.manifest.settings.runtime.label(), runtime);
    }
}

/// The behaviour every template documents, through `ctxhost hook`.
fn check_notes(p: &Scaffolded) {
    assert_eq!(p.recall("a1"), Vec::<String>::new(), "nothing is stored yet");
    // Assistant text and blank messages are not notes; quotes and UTF-8 survive.
    p.after_turn(
        "a1",
        json!([
            {"role": "user", "content": "My cat is called \"Miso\" — café"},
            {"role": "assistant", "content": "Noted!"},
            {"role": "user", "content": "  "},
        ]),
    );
    assert_eq!(p.recall("a1"), ["My cat is called \"Miso\" — café"]);
    p.after_turn("a2", json!([{"role": "user", "content": "I am the other agent"}]));
    p.after_turn(
        "a1",
        json!([
            {"role": "user", "content": "I live in Lisbon"},
            {"role": "user", "content": "I like tea"},
            {"role": "user", "content": "I play chess"},
        ]),
    );
    // The 3 latest of a1's own notes, newest first.
    assert_eq!(p.recall("a1"), ["I play chess", "I like tea", "I live in Lisbon"]);
    assert_eq!(p.recall("a2"), ["I am the other agent"]);
    assert_eq!(p.recall("nobody"), Vec::<String>::new());
}

fn check_script_template(runtime: &str, program: &str, package: &str) {
    require_program(program, package);
    let p = Scaffolded::new(&format!("my-{runtime}"), runtime);
    p.check_manifest(runtime);
    check_notes(&p);
}

/// Deno and Bun come from npm (`scripts/test.sh` installs them when missing).
fn require_npm_program(program: &str) {
    let path = std::env::var_os("PATH");
    if ctxhost::runner::process::find_on_path(program, path.as_deref()).is_none() {
        panic!(
            "`{program}` is not installed, and this test runs it for real. \
             Run `scripts/test.sh` (it installs what is missing) or `npm install -g {program}`."
        );
    }
}

#[test]
fn python_template_runs_as_generated() {
    check_script_template("python", "python3", "python3");
}

#[test]
fn node_template_runs_as_generated() {
    check_script_template("node", "node", "nodejs");
}

#[test]
fn bash_template_runs_as_generated() {
    check_script_template("bash", "bash", "bash");
}

#[test]
fn go_template_runs_as_generated() {
    check_script_template("go", "go", "golang-go");
}

#[test]
fn ruby_template_runs_as_generated() {
    check_script_template("ruby", "ruby", "ruby");
}

#[test]
fn lua_template_runs_as_generated() {
    check_script_template("lua", "lua", "lua5.4");
}

#[test]
fn php_template_runs_as_generated() {
    check_script_template("php", "php", "php-cli");
}

#[test]
fn deno_template_runs_as_generated() {
    require_npm_program("deno");
    let p = Scaffolded::new("my-deno", "deno");
    p.check_manifest("deno");
    check_notes(&p);
}

#[test]
fn bun_template_runs_as_generated() {
    require_npm_program("bun");
    let p = Scaffolded::new("my-bun", "bun");
    p.check_manifest("bun");
    check_notes(&p);
}

#[test]
fn native_template_is_an_executable_that_runs_as_generated() {
    use std::os::unix::fs::PermissionsExt;
    require_program("bash", "bash");
    let p = Scaffolded::new("my-native", "native");
    let mode = std::fs::metadata(p.dir.join("hooks/memory")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o755);
    assert!(std::fs::read_to_string(p.dir.join("hooks/memory")).unwrap().starts_with("#!/usr/bin/env bash\n"));
    p.check_manifest("native");
    check_notes(&p);
}

/// v is in no registry this machine reaches: check the files and the exact
/// command line ctxhost runs, through a stand-in `v` that records it.
#[test]
fn v_template_has_the_v_command_shape() {
    let p = Scaffolded::new("my-v", "v");
    p.check_manifest("v");
    let source = std::fs::read_to_string(p.dir.join("hooks/memory.v")).unwrap();
    for needle in ["module main", "fn main()", "fn after_turn(", "fn ingest(", "'data/notes.jsonl'"] {
        assert!(source.contains(needle), "hooks/memory.v lacks {needle:?}");
    }

    let path = std::env::var_os("PATH");
    if ctxhost::runner::process::find_on_path("v", path.as_deref()).is_some() {
        // V is installed after all: run the template for real.
        check_notes(&p);
    } else {
        let assert = p.hook("ingest", &json!({"agent_id": "a1", "message": "hi"})).failure();
        assert_eq!(
            stderr(&assert),
            "error: Runtime launcher 'v' not found on PATH: looked for v \
             (Install V from https://vlang.io/#install (`v` must be on PATH))\n"
        );
    }

    // A stand-in `v` first on PATH: it records its arguments and cwd, then answers.
    let bin = p.root.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    // In the plugin's own dir: the sandbox lets a hook write there.
    let log = p.dir.join("v-args");
    let fake = format!(
        "#!/bin/sh\nprintf '%s\\n' \"$PWD\" \"$@\" > '{}'\necho '{{\"type\":\"ingest_result\",\"memories\":[]}}'\n",
        log.display()
    );
    std::fs::write(bin.join("v"), fake).unwrap();
    std::fs::set_permissions(bin.join("v"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let assert = ctxhost()
        .arg("--home")
        .arg(&p.home)
        .args(["hook", p.dir.to_str().unwrap(), "ingest"])
        .env("PATH", path)
        .write_stdin(r#"{"agent_id":"a1","message":"hi"}"#)
        .assert()
        .success();
    assert_eq!(reply(&assert), json!({"type": "ingest_result", "memories": []}));
    let dir = p.dir.canonicalize().unwrap();
    let recorded = std::fs::read_to_string(&log).unwrap();
    let expected = format!("{dir}\n-no-retry-compilation\nrun\n{dir}/hooks/memory.v\n", dir = dir.display());
    assert_eq!(recorded, expected);
}

/// `cargo build --release --target wasm32-wasip2` of a scaffolded Rust
/// project, once per test run, sharing the guest examples' target dir (and so
/// their wit-bindgen build). Returns the built component.
fn build_rust_project(dir: &Path, name: &str) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| repo_root().join("target"))
                .join("guest-wasm");
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let out = std::process::Command::new(cargo)
                .current_dir(dir)
                .args(["build", "--release", "--quiet", "--target", "wasm32-wasip2"])
                .env("CARGO_TARGET_DIR", &target)
                .output()
                .expect("run cargo");
            assert!(
                out.status.success(),
                "building the scaffolded Rust project in {} failed (is the wasm32-wasip2 target installed? \
                 `rustup target add wasm32-wasip2`, which scripts/test.sh does):\n{}",
                dir.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            target.join("wasm32-wasip2/release").join(format!("{}.wasm", name.replace('-', "_")))
        })
        .clone()
}

#[test]
fn rust_template_is_a_self_contained_component_project() {
    let p = Scaffolded::new("my-rust", "rust");
    // Self-contained: the host's WIT and the SDK, reading the project's own copy of it.
    let wit = std::fs::read_to_string(p.dir.join("wit/ctxhost.wit")).unwrap();
    assert_eq!(wit, std::fs::read_to_string(repo_root().join("wit/ctxhost.wit")).unwrap());
    let sdk = std::fs::read_to_string(p.dir.join("sdk/src/lib.rs")).unwrap();
    assert!(sdk.contains("path: \"../wit\""), "the SDK must read the project's wit/");
    let cargo = std::fs::read_to_string(p.dir.join("Cargo.toml")).unwrap();
    assert!(cargo.contains("[workspace]") && cargo.contains("path = \"sdk\""), "{cargo}");
    assert!(!cargo.contains("../"), "nothing outside the project: {cargo}");
    let manifest: toml::Table = toml::from_str(&std::fs::read_to_string(p.dir.join("plugin.toml")).unwrap()).unwrap();
    let component = manifest["component"].as_str().unwrap().to_owned();
    assert_eq!(component, "target/wasm32-wasip2/release/my_rust.wasm");

    let built = build_rust_project(&p.dir, "my-rust");
    // The build shared another target dir: put the component where a plain
    // `cargo build --release` in the project writes it.
    let dest = p.dir.join(&component);
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    std::fs::copy(&built, &dest).unwrap();

    p.check_manifest("wasm");
    check_notes(&p);
}

#[test]
fn wasm_means_the_rust_project() {
    let p = Scaffolded::new("comp", "WASM");
    assert!(p.dir.join("src/lib.rs").is_file() && p.dir.join("Cargo.toml").is_file());
}

#[test]
fn human_output_names_the_path_and_the_next_steps() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("elsewhere");
    let assert = ctxhost()
        .arg("--home")
        .arg(root.path().join("home"))
        .args(["new", "shout", "--runtime", "rust", "--description", "Shouts \"tool\" results", "--dir"])
        .arg(&dir)
        .assert()
        .success();
    let out = String::from_utf8_lossy(&assert.get_output().stdout).into_owned();
    let path = dir.join("shout").canonicalize().unwrap();
    let home = root.path().join("home");
    assert!(out.starts_with(&format!("Created rust plugin `shout` in {}\n", path.display())), "{out}");
    assert!(
        out.contains(&format!(
            "  cd {}\n  cargo build --release\n  ctxhost --home {} hook . after_turn",
            path.display(),
            home.display()
        )),
        "the next steps keep the --home given: {out}"
    );
    assert!(out.contains(&format!("  ctxhost --home {} hook . ingest", home.display())), "{out}");
    assert!(out.contains("Then edit src/lib.rs"), "{out}");
    // --dir wins over the plugins dir; the description is escaped into TOML.
    assert!(!root.path().join("home/plugins/shout").exists());
    let manifest: toml::Table = toml::from_str(&std::fs::read_to_string(path.join("plugin.toml")).unwrap()).unwrap();
    assert_eq!(manifest["description"].as_str(), Some("Shouts \"tool\" results"));
}

/// The names in `dir`, sorted (leftover temp dirs would show here).
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = match std::fs::read_dir(dir) {
        Ok(rd) => rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    names
}

#[test]
fn an_existing_plugin_is_never_touched() {
    let p = Scaffolded::new("dup", "python");
    std::fs::write(p.dir.join("hooks/mine.txt"), "keep me").unwrap();
    let before = std::fs::read_to_string(p.dir.join("plugin.toml")).unwrap();
    let run = |name: &str| {
        ctxhost()
            .arg("--home")
            .arg(&p.home)
            .arg("--plugins-dir")
            .arg(&p.plugins)
            .args(["new", name, "--runtime", "node"])
            .assert()
            .failure()
    };
    assert_eq!(stderr(&run("dup")), "error: Plugin 'dup' already exists\n");
    assert_eq!(std::fs::read_to_string(p.dir.join("plugin.toml")).unwrap(), before);
    assert_eq!(std::fs::read_to_string(p.dir.join("hooks/mine.txt")).unwrap(), "keep me");
    assert!(!p.dir.join("hooks/memory.js").exists());
    // An empty directory of that name counts too (plain rename would replace it).
    std::fs::create_dir(p.plugins.join("empty")).unwrap();
    assert_eq!(stderr(&run("empty")), "error: Plugin 'empty' already exists\n");
    assert_eq!(entries(&p.plugins.join("empty")), Vec::<String>::new());
    assert_eq!(entries(&p.plugins), ["dup", "empty"]);
}

#[test]
fn an_invalid_name_is_refused_with_the_spec_text() {
    let root = tempfile::tempdir().unwrap();
    let plugins = root.path().join("plugins");
    for name in ["bad name", "../escape", "é"] {
        let assert = ctxhost().arg("--plugins-dir").arg(&plugins).args(["new", name]).assert().failure();
        assert_eq!(
            stderr(&assert),
            format!(
                "error: Invalid plugin name '{name}': must contain only ASCII letters, digits, hyphens, and underscores\n"
            )
        );
    }
    assert_eq!(entries(root.path()), Vec::<String>::new(), "nothing is created");
}

#[test]
fn an_unknown_runtime_lists_the_valid_ones() {
    let root = tempfile::tempdir().unwrap();
    let plugins = root.path().join("plugins");
    let assert =
        ctxhost().arg("--plugins-dir").arg(&plugins).args(["new", "x", "--runtime", "pyhton"]).assert().failure();
    assert_eq!(
        stderr(&assert),
        "error: unknown runtime 'pyhton'; did you mean `python`? Valid runtimes: python, node, deno, go, ruby, \
         bash, bun, php, lua, v, native, rust (wasm = rust; aliases such as py, js, ts, golang, rb and sh work too)\n"
    );
    let assert = ctxhost()
        .arg("--plugins-dir")
        .arg(&plugins)
        .args(["new", "x", "--runtime", "/usr/bin/python3"])
        .assert()
        .failure();
    assert!(stderr(&assert).starts_with("error: unknown runtime '/usr/bin/python3'. Valid runtimes: python,"));
    assert_eq!(entries(root.path()), Vec::<String>::new(), "nothing is created");
}

#[test]
fn the_library_call_the_scaffold_route_makes() {
    use ctxhost::scaffold::{ScaffoldError, ScaffoldRequest, scaffold};
    let root = tempfile::tempdir().unwrap();
    let plugins = root.path().join("plugins");
    let request = ScaffoldRequest { name: "notes", description: Some("Takes notes"), runtime: None };
    let dir = scaffold(&plugins, &request).unwrap();
    assert_eq!(dir, plugins.join("notes"));
    let loaded = ctxhost::manifest::Manifest::load(&dir).unwrap();
    assert_eq!(loaded.manifest.settings.runtime.label(), "python", "python is the default");
    assert_eq!(loaded.manifest.description.as_deref(), Some("Takes notes"));

    let err = scaffold(&plugins, &request).unwrap_err();
    assert!(matches!(err, ScaffoldError::AlreadyExists(ref n) if n == "notes"));
    let bad = ScaffoldRequest { name: "a/b", ..request };
    assert!(matches!(scaffold(&plugins, &bad).unwrap_err(), ScaffoldError::InvalidName(_)));
    let bad = ScaffoldRequest { name: "other", runtime: Some("cobol"), ..request };
    match scaffold(&plugins, &bad).unwrap_err() {
        ScaffoldError::UnknownRuntime { tag, valid } => {
            assert_eq!(tag, "cobol");
            assert!(valid.contains("rust"), "{valid}");
        }
        other => panic!("{other}"),
    }
    // A plugins dir that cannot be written: an I/O error naming it, nothing left.
    let file = root.path().join("not-a-dir");
    std::fs::write(&file, "").unwrap();
    let err = scaffold(&file, &ScaffoldRequest { name: "x", ..request }).unwrap_err();
    assert!(matches!(err, ScaffoldError::Io { ref path, .. } if path == &file), "{err:?}");
    assert_eq!(entries(&plugins), ["notes"]);
}

/// The next steps keep `--home` and `--config` (made absolute: they start with
/// a `cd`), and work as printed: run in a shell, the ingest step recalls what
/// the after_turn step stored, in that home.
#[test]
fn next_steps_keep_the_home_and_config_given_and_work_as_printed() {
    require_program("python3", "python3");
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("work")).unwrap();
    std::fs::write(root.path().join("work/my.toml"), "[context_engine]\n").unwrap();
    let assert = ctxhost()
        .current_dir(root.path().join("work"))
        .args(["--home", "../h", "--config", "my.toml", "new", "notes", "--json"])
        .assert()
        .success();
    let report = reply(&assert);
    let home = root.path().join("h").canonicalize().unwrap();
    let config = root.path().join("work/my.toml").canonicalize().unwrap();
    let steps: Vec<&str> = report["next_steps"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    let flags = format!("ctxhost --home {} --config {} hook . ", home.display(), config.display());
    assert!(steps[1].starts_with(&format!("{flags}after_turn")), "{steps:?}");
    assert!(steps[2].starts_with(&format!("{flags}ingest")), "{steps:?}");
    assert_eq!(report["warnings"], json!([]), "python3 is installed");

    // Run them as printed, with this build as `ctxhost`, from another directory.
    let bin = root.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(assert_cmd::cargo::cargo_bin("ctxhost"), bin.join("ctxhost")).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let out = std::process::Command::new("bash")
        .args(["-c", &steps.join(" && ")])
        .current_dir(root.path())
        .env("PATH", path)
        .env_remove("CTXHOST_HOME")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let ingest: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(ingest["memories"], json!([{"content": "My cat is called Miso"}]), "{stdout}");
    assert!(home.join("grants.toml").exists() && home.join("hook-home").is_dir(), "the hooks ran with the home given");
    // One-shot hooks call no host service: `ctxhost hook` left the store closed.
    assert!(!home.join("state.db").exists());
    assert!(!root.path().join("work/notes").exists());
}

/// Without its runtime on PATH, every template but native is still created,
/// with a warning naming the install command, which also heads the next steps.
#[test]
fn a_runtime_missing_from_path_is_warned_about_with_its_install_command() {
    let root = tempfile::tempdir().unwrap();
    let empty = root.path().join("empty-path");
    std::fs::create_dir_all(&empty).unwrap();
    let install = [
        ("python", "sudo apt-get install python3"),
        ("node", "sudo apt-get install nodejs"),
        ("deno", "curl -fsSL https://deno.land/install.sh | sh"),
        ("go", "sudo apt-get install golang-go"),
        ("ruby", "sudo apt-get install ruby"),
        ("bash", "sudo apt-get install bash"),
        ("bun", "curl -fsSL https://bun.sh/install | bash"),
        ("php", "sudo apt-get install php-cli"),
        ("lua", "sudo apt-get install lua5.4"),
        ("v", "git clone --depth=1 https://github.com/vlang/v && cd v && make && sudo ./v symlink"),
        ("rust", "curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh"),
    ];
    for (runtime, command) in install {
        let name = format!("p-{runtime}");
        let assert = ctxhost()
            .arg("--plugins-dir")
            .arg(root.path().join("plugins"))
            .args(["new", &name, "--runtime", runtime])
            .env("PATH", &empty)
            .assert()
            .success();
        let err = stderr(&assert);
        let out = String::from_utf8_lossy(&assert.get_output().stdout).into_owned();
        assert!(root.path().join("plugins").join(&name).join("plugin.toml").is_file(), "{runtime}: created");
        assert!(err.contains("is not on PATH, so this plugin's hooks cannot run yet."), "{runtime}: {err}");
        assert!(err.contains(&format!("Install it with: {command}")), "{runtime}: {err}");
        assert!(out.contains(&format!("Next steps:\n  {command}\n  cd ")), "{runtime}: {out}");
    }
    let assert = ctxhost()
        .arg("--plugins-dir")
        .arg(root.path().join("plugins"))
        .args(["new", "p-native", "--runtime", "native"])
        .env("PATH", &empty)
        .assert()
        .success();
    assert_eq!(stderr(&assert), "", "a native hook needs no runtime");
    // With the runtime on PATH: no warning.
    let assert = ctxhost()
        .arg("--plugins-dir")
        .arg(root.path().join("plugins"))
        .args(["new", "p2", "--runtime", "bash"])
        .assert()
        .success();
    assert_eq!(stderr(&assert), "");
}

/// The README `ctxhost new` writes describes the protocol itself (no file the
/// user does not have) and its request/reply examples are what the hooks
/// really take and answer.
#[test]
fn the_readme_describes_the_protocol_with_examples_that_work() {
    require_program("python3", "python3");
    let p = Scaffolded::new("readme", "python");
    let readme = std::fs::read_to_string(p.dir.join("README.md")).unwrap();
    assert!(!readme.contains("spec/"), "no spec file the user does not have:\n{readme}");
    for doc in ["`docs/reference/hooks.md` in the ctxhost repository", "`docs/guides/script.md`"] {
        assert!(readme.contains(doc), "{doc}:\n{readme}");
    }
    // `request` → `reply` pairs, as the README shows them.
    let examples: Vec<(Value, Value)> = readme
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("`{\"type\":\"after_turn\"") || l.starts_with("`{\"type\":\"ingest\""))
        .map(|request_line| {
            let after = readme.split(request_line).nth(1).unwrap().trim_start();
            let reply_line = after.strip_prefix("→ `").unwrap_or_else(|| panic!("no reply after {request_line}"));
            let parse = |s: &str| serde_json::from_str::<Value>(&s[..s.find('`').unwrap()]).unwrap();
            (parse(&request_line[1..]), parse(reply_line))
        })
        .collect();
    assert_eq!(examples.len(), 2, "{readme}");
    for (request, expected) in examples {
        let hook = request["type"].as_str().unwrap().to_owned();
        let assert = p.hook(&hook, &request).success();
        assert_eq!(reply(&assert), expected, "{hook}");
        assert!(!stderr(&assert).contains("has no field"), "{}", stderr(&assert));
    }
}
