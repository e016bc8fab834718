//! FaustBot (and python plugin.toml) dependency installs under attack: a
//! plugin dir planting `venv`/`pip`/`ensurepip` modules for the host's own
//! interpreters to import, a dependency that exists only as a source
//! distribution whose build code writes outside, requirement lines pip
//! takes as local archives or paths, and a requirements.txt appearing in a
//! running plugin's dir. Each test checks the effect: the marker file
//! outside every directory the plugin may write stays absent, no
//! environment is built when none may be.
//!
//! Every marker lives in its own temporary directory outside the ctxhost
//! home: a plugin's code (and pip, confined as the plugin) cannot write
//! there; an unconfined interpreter could.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::util::http::Daemon;
use crate::util::site::Site;
use crate::util::{ctxhost, require_program, stderr, write, write_wheel};

/// The wheel every test plugin imports (in a local find-links dir).
const PROBE: &str = "ctxhost_attack_probe";

/// A FaustBot plugin importing [`PROBE`] at module level and answering
/// `communicate` with its `VALUE` (or `module`'s, when given).
fn faust_plugin(site: &Site, id: &str, module: &str) {
    let dir = site.plugin_dir(id);
    write(&dir.join("plugin.json"), &json!({"id": id, "name": id, "version": "0.1.0", "entry": "impl.py"}).to_string());
    write(
        &dir.join("impl.py"),
        &format!(
            "import sys\nimport {module}\nfrom faust_backend.plugin_system import FaustPlugin\n\n\
             class Plugin(FaustPlugin):\n    def communicate_handler(self, payload, ctx):\n        \
             return {{\"value\": {module}.VALUE, \"prefix\": sys.prefix}}\n\n\
             def get_plugin():\n    return Plugin()\n"
        ),
    );
}

/// Modules named like the ones the host's interpreters run (`python -m venv`,
/// `-m pip`, `-m ensurepip`), each appending its name to `marker` when
/// imported — what ran from the plugin's dir, unconfined, before.
fn plant_modules(dir: &Path, marker: &Path) {
    for module in ["venv", "pip", "ensurepip"] {
        let code =
            format!("open({:?}, 'a').write('{module} imported from the plugin dir\\n')\n", marker.to_str().unwrap());
        write(&dir.join(module).join("__init__.py"), &code);
        write(&dir.join(module).join("__main__.py"), &code);
    }
}

/// A source distribution `<package>-0.1.tar.gz` in `dir` whose in-tree build
/// backend (PEP 517, no build requirements: it builds offline) tries to
/// append to `marker`, then builds a wheel whose `VALUE` says how that went
/// (`written` or `denied: <error>`).
fn write_sdist(dir: &Path, package: &str, marker: &Path) -> PathBuf {
    const BACKEND: &str = r#"import os, zipfile
MARKER = @MARKER@
PKG = @PKG@

def _attempt():
    try:
        with open(MARKER, "a") as f:
            f.write("the build code ran unconfined\n")
        return "written"
    except OSError as e:
        return "denied: " + type(e).__name__

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    result = _attempt()
    name = PKG + "-0.1-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as z:
        z.writestr(PKG + "/__init__.py", "VALUE = %r\n" % result)
        d = PKG + "-0.1.dist-info/"
        z.writestr(d + "METADATA", "Metadata-Version: 2.1\nName: %s\nVersion: 0.1\n" % PKG)
        z.writestr(d + "WHEEL", "Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(d + "RECORD", "")
    return name
"#;
    let tree = tempfile::tempdir().unwrap();
    let root = tree.path().join(format!("{package}-0.1"));
    write(
        &root.join("pyproject.toml"),
        "[build-system]\nrequires = []\nbuild-backend = \"probe_backend\"\nbackend-path = [\".\"]\n",
    );
    write(&root.join("PKG-INFO"), &format!("Metadata-Version: 2.1\nName: {package}\nVersion: 0.1\n"));
    let backend = BACKEND
        .replace("@MARKER@", &format!("{:?}", marker.to_str().unwrap()))
        .replace("@PKG@", &format!("{package:?}"));
    write(&root.join("probe_backend.py"), &backend);
    std::fs::create_dir_all(dir).unwrap();
    let archive = dir.join(format!("{package}-0.1.tar.gz"));
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import sys, tarfile\nwith tarfile.open(sys.argv[1], 'w:gz') as t: t.add(sys.argv[2], arcname=sys.argv[3])",
        ])
        .arg(&archive)
        .arg(&root)
        .arg(format!("{package}-0.1"))
        .output()
        .expect("run python3");
    assert!(out.status.success(), "writing the sdist failed: {}", String::from_utf8_lossy(&out.stderr));
    archive
}

/// pip's index: only the local `wheels` dir.
fn offline(wheels: &Path) -> [(&'static str, String); 2] {
    [("PIP_NO_INDEX", "1".to_owned()), ("PIP_FIND_LINKS", wheels.to_str().unwrap().to_owned())]
}

/// `ctxhost --home <home> plugin <args>` with pip offline on `wheels`.
fn plugin_cmd(site: &Site, wheels: &Path, args: &[&str]) -> assert_cmd::Command {
    let mut cmd = ctxhost();
    cmd.arg("--home").arg(site.home()).arg("plugin").args(args);
    for (k, v) in offline(wheels) {
        cmd.env(k, v);
    }
    cmd
}

fn start(site: &Site, wheels: &Path) -> Daemon {
    let envs = offline(wheels);
    let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    site.start(&envs)
}

fn ask(d: &Daemon, id: &str) -> Value {
    let r = d.post(&format!("/faust/plugins/{id}/communicate"), "{}");
    assert_eq!(r.status, 200, "{id}: {}", r.body);
    r.json()
}

fn assert_absent(marker: &Path, after: &str) {
    assert!(
        !marker.exists(),
        "after {after}, the marker outside was written: {:?}",
        std::fs::read_to_string(marker).unwrap_or_default()
    );
}

/// The attacker plants `venv/`, `pip/` and `ensurepip/` packages (each
/// appending to a marker file outside every directory it may write) plus a
/// requirements.txt in its own plugin dir, so that the host's
/// `python -m venv` / `-m pip` / ensurepip — run from the plugin dir before —
/// import them unconfined. Must hold: through `ctxhost plugin deps`, a start
/// with installs at start turned on, a reload, and `ctxhost plugin install`
/// of a python plugin.toml plugin carrying the same files, the environment
/// is built (the real pip ran) and the marker never appears.
#[test]
fn planted_venv_pip_and_ensurepip_modules_never_run_on_deps_start_reload_or_install() {
    require_program("python3", "python3 python3-venv");
    let site = Site::new();
    let outside = tempfile::tempdir().unwrap();
    let marker = outside.path().join("planted-module-ran");
    let wheels = site.home().join("wheels");
    write_wheel(&wheels, PROBE, "from-the-venv");
    faust_plugin(&site, "planter", PROBE);
    let dir = site.plugin_dir("planter");
    plant_modules(&dir, &marker);
    write(&dir.join("requirements.txt"), &format!("{PROBE}==0.1\n"));

    // `ctxhost plugin deps`.
    let a = plugin_cmd(&site, &wheels, &["deps", "planter"]).assert().success();
    let out = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    assert!(out.contains("pip: Successfully installed ctxhost_attack_probe-0.1"), "{out}");
    assert_absent(&marker, "`ctxhost plugin deps`");

    // A start that installs (changed requirements: a rebuild).
    write(&site.home().join("config.toml"), "[faustbot]\ninstall_deps_at_start = true\n");
    write(&dir.join("requirements.txt"), &format!("# changed\n{PROBE}==0.1\n"));
    let d = start(&site, &wheels);
    let venv = site.home().join("venvs/planter");
    assert_eq!(ask(&d, "planter"), json!({"value": "from-the-venv", "prefix": venv.to_str().unwrap()}));
    assert_absent(&marker, "a start installing the dependencies");

    // A reload that installs (changed again).
    write(&dir.join("requirements.txt"), &format!("# changed again\n{PROBE}==0.1\n"));
    let r = d.post("/api/plugins/planter/reload", "");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(ask(&d, "planter")["value"], "from-the-venv");
    assert_absent(&marker, "a reload installing the dependencies");
    assert!(d.stop().0);

    // `ctxhost plugin install` of a python plugin.toml plugin with the same planted files.
    let source = outside.path().join("src/pyplanter");
    write(
        &source.join("plugin.toml"),
        "name = \"pyplanter\"\nversion = \"0.1.0\"\n[hooks]\nruntime = \"python\"\ningest = \"hooks/ingest.py\"\n",
    );
    write(&source.join("hooks/ingest.py"), "import sys\nsys.stdin.read()\nprint('{}')\n");
    write(&source.join("requirements.txt"), &format!("{PROBE}==0.1\n"));
    plant_modules(&source, &marker);
    let a = plugin_cmd(&site, &wheels, &["install", source.to_str().unwrap()]).assert().success();
    let out = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    assert!(out.contains("pip: Successfully installed ctxhost_attack_probe-0.1"), "{out}");
    assert_absent(&marker, "`ctxhost plugin install`");
    // And `ctxhost plugin deps` of the installed plugin.toml plugin (a rebuild).
    plugin_cmd(&site, &wheels, &["deps", "pyplanter"]).assert().success();
    assert_absent(&marker, "`ctxhost plugin deps` of a plugin.toml plugin");
}

/// The attacker depends on a package that exists only as a source
/// distribution whose build code (an in-tree PEP 517 backend) appends to a
/// marker file outside. Must hold: without the operator's opt-in pip builds
/// nothing — the install fails naming the package and
/// `ctxhost plugin grant <id> --source-builds`, the marker is absent, no
/// environment is left; with the opt-in the build runs confined: it
/// succeeds, the plugin imports the built package, and the build code's
/// write outside was denied (the marker is still absent).
#[test]
fn an_sdist_only_dependency_is_refused_without_the_opt_in_and_built_confined_with_it() {
    require_program("python3", "python3 python3-venv");
    let site = Site::new();
    let outside = tempfile::tempdir().unwrap();
    let marker = outside.path().join("sdist-build-ran");
    let wheels = site.home().join("wheels");
    write_sdist(&wheels, "ctxhost_sdist_probe", &marker);
    faust_plugin(&site, "builder", "ctxhost_sdist_probe");
    write(&site.plugin_dir("builder").join("requirements.txt"), "ctxhost_sdist_probe==0.1\n");

    let a = plugin_cmd(&site, &wheels, &["deps", "builder"]).assert().failure();
    let err = stderr(&a);
    assert!(err.contains("--only-binary=:all:"), "{err}");
    assert!(
        err.contains("no wheel of `ctxhost_sdist_probe` was found")
            && err.contains("`ctxhost plugin grant builder --source-builds`"),
        "names the package and the opt-in: {err}"
    );
    assert_absent(&marker, "an install without the opt-in");
    assert!(!site.home().join("venvs/builder").exists(), "no environment is left");

    site.ctxhost(&["plugin", "grant", "builder", "--source-builds"]);
    let grants = std::fs::read_to_string(site.home().join("grants.toml")).unwrap();
    assert!(grants.contains("source_builds = true"), "{grants}");
    let a = plugin_cmd(&site, &wheels, &["deps", "builder"]).assert().success();
    let out = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    assert!(out.contains("Successfully installed ctxhost_sdist_probe-0.1"), "{out}");
    assert_absent(&marker, "a confined source build");

    let d = start(&site, &wheels);
    let value = ask(&d, "builder")["value"].clone();
    assert!(d.stop().0);
    assert!(
        value.as_str().is_some_and(|v| v.starts_with("denied: ")),
        "the build code ran, and its write outside was denied: {value}"
    );
}

/// The attacker lists its own archive or source tree, which pip takes as a
/// local file and builds (running its build code): `x-1.0.tar.gz` (a name
/// pip treats as an archive path), `./x`, `file:` and `x @ file://…`
/// references. Must hold, even with source builds allowed: each line is
/// refused before pip runs, naming the line; the build code's marker is
/// absent and no environment is built — for a FaustBot plugin
/// (`plugin deps`) and a python plugin.toml plugin (`plugin install`).
#[test]
fn archive_path_and_file_requirement_lines_are_refused() {
    require_program("python3", "python3 python3-venv");
    let site = Site::new();
    let outside = tempfile::tempdir().unwrap();
    let marker = outside.path().join("local-archive-built");
    let wheels = site.home().join("wheels");
    std::fs::create_dir_all(&wheels).unwrap();
    faust_plugin(&site, "local", "x");
    let dir = site.plugin_dir("local");
    let archive = write_sdist(&dir, "x", &marker);
    std::fs::rename(&archive, dir.join("x-1.0.tar.gz")).unwrap();
    write_sdist(&outside.path().join("pkgs"), "x", &marker);
    let unpacked = dir.join("x");
    std::fs::create_dir_all(&unpacked).unwrap();
    let untar = std::process::Command::new("tar")
        .args(["-xzf"])
        .arg(outside.path().join("pkgs/x-0.1.tar.gz"))
        .args(["--strip-components=1", "-C"])
        .arg(&unpacked)
        .status()
        .unwrap();
    assert!(untar.success());
    site.ctxhost(&["plugin", "grant", "local", "--source-builds"]);

    let absolute = format!("file://{}", dir.join("x-1.0.tar.gz").display());
    let lines = [
        "x-1.0.tar.gz".to_owned(),
        "./x-1.0.tar.gz".to_owned(),
        "./x".to_owned(),
        "x".to_owned() + "/",
        "file:x-1.0.tar.gz".to_owned(),
        absolute.clone(),
        format!("x @ {absolute}"),
    ];
    for line in &lines {
        write(&dir.join("requirements.txt"), &format!("requests>=2\n{line}\n"));
        let a = plugin_cmd(&site, &wheels, &["deps", "local"]).assert().failure();
        let err = stderr(&a);
        assert!(err.contains("line 2") && err.contains("is not a package specifier"), "{line}: {err}");
        assert_absent(&marker, &format!("`plugin deps` with the line {line:?}"));
        assert!(!site.home().join("venvs/local").exists(), "{line}: no environment");
    }

    let source = outside.path().join("src/pylocal");
    write(
        &source.join("plugin.toml"),
        "name = \"pylocal\"\nversion = \"0.1.0\"\n[hooks]\nruntime = \"python\"\ningest = \"hooks/ingest.py\"\n",
    );
    write(&source.join("hooks/ingest.py"), "print('{}')\n");
    std::fs::copy(dir.join("x-1.0.tar.gz"), source.join("x-1.0.tar.gz")).unwrap();
    write(&source.join("requirements.txt"), "x-1.0.tar.gz\n");
    let a = plugin_cmd(&site, &wheels, &["install", source.to_str().unwrap(), "--source-builds"]).assert().failure();
    let err = stderr(&a);
    assert!(err.contains("`requirements.txt` line 1: `x-1.0.tar.gz` is not a package specifier"), "{err}");
    assert_absent(&marker, "`plugin install` with an archive line");
    assert!(!site.plugin_dir("pylocal").exists());
}

/// The attacker, a running FaustBot plugin with no dependencies, writes a
/// requirements.txt into its own dir (listing a real package) and waits for
/// a reload or restart to install it. Must hold with the default config:
/// the reload is refused naming `ctxhost plugin deps <id>` and the running
/// version keeps answering; a restart leaves that plugin out with the same
/// error while the others run; no environment and no pip cache appear.
/// With `[faustbot] install_deps_at_start = true` a start installs it.
#[test]
fn a_requirements_file_appearing_in_a_running_plugin_installs_nothing_unless_the_operator_said_so() {
    require_program("python3", "python3 python3-venv");
    let site = Site::new();
    let wheels = site.home().join("wheels");
    write_wheel(&wheels, PROBE, "from-the-venv");
    for id in ["quiet", "other"] {
        let dir = site.plugin_dir(id);
        write(
            &dir.join("plugin.json"),
            &json!({"id": id, "name": id, "version": "0.1.0", "entry": "impl.py"}).to_string(),
        );
        write(
            &dir.join("impl.py"),
            "from faust_backend.plugin_system import FaustPlugin\n\nclass Plugin(FaustPlugin):\n    \
             def communicate_handler(self, payload, ctx):\n        return {\"value\": \"no deps\"}\n\n\
             def get_plugin():\n    return Plugin()\n",
        );
    }
    let d = start(&site, &wheels);
    assert_eq!(ask(&d, "quiet")["value"], "no deps");

    let dir = site.plugin_dir("quiet");
    write(&dir.join("requirements.txt"), &format!("{PROBE}==0.1\n"));
    faust_plugin(&site, "quiet", PROBE);
    let r = d.post("/api/plugins/quiet/reload", "");
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("not installed") && r.body.contains("ctxhost plugin deps quiet"), "{}", r.body);
    assert_eq!(ask(&d, "quiet")["value"], "no deps", "the running version keeps answering");
    let venv = site.home().join("venvs/quiet");
    let cache = site.home().join("cache/pip/quiet");
    assert!(!venv.exists() && !cache.exists(), "nothing was installed");
    assert!(d.stop().0);

    let d = start(&site, &wheels);
    let r = d.post("/faust/plugins/quiet/communicate", "{}");
    assert_eq!(r.status, 404, "left out: {}", r.body);
    let plugins = d.get("/api/agent/plugins").json();
    let quiet = plugins.as_array().unwrap().iter().find(|p| p["name"] == "quiet").cloned().unwrap_or_default();
    let error = quiet["error"].as_str().unwrap_or_default();
    assert!(error.contains("ctxhost plugin deps quiet"), "{plugins}");
    assert_eq!(ask(&d, "other")["value"], "no deps", "the others run");
    assert!(d.stop().0);
    assert!(!venv.exists() && !cache.exists(), "nothing was installed");

    write(&site.home().join("config.toml"), "[faustbot]\ninstall_deps_at_start = true\n");
    let d = start(&site, &wheels);
    assert_eq!(ask(&d, "quiet")["value"], "from-the-venv", "installed at start when the operator said so");
    assert!(d.stop().0);
}
