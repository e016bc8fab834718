//! The script sandbox (spec section 6) through the real `ctxhost hook`:
//! Landlock keeps a hook inside its dirs, a network namespace off the host's
//! network, a per-call cgroup (or rlimits) bounds memory and processes and
//! kills what escaped the process group. The core cases run again as an
//! unprivileged user (uid 65534) when the tests run as root.

use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::util::nobody::{chown_tree, link_or_copy};
use crate::util::procs::Marker;
use crate::util::{TestPlugin, ctxhost, reply, require_program, stderr, within, write};

/// The memories' contents of an ingest reply.
fn contents(r: &Value) -> Vec<String> {
    r["memories"]
        .as_array()
        .map(|a| a.iter().map(|m| m["content"].as_str().unwrap_or("").to_owned()).collect())
        .unwrap_or_default()
}

/// A bash ingest hook that reports lines as memories: `body` prints one
/// line per finding on stdout before the reply is built.
fn bash_probe(body: &str, extra_manifest: &str) -> TestPlugin {
    let script = format!(
        "exec 9>&1 1>\"$TMPDIR/lines\"\n{body}\nexec 1>&9\nprintf '{{\"memories\":['\nsep=\nwhile IFS= read -r l; do printf '%s{{\"content\":\"%s\"}}' \"$sep\" \"$l\"; sep=,; done < \"$TMPDIR/lines\"\necho ']}}'\n"
    );
    TestPlugin::bash("ingest", &script, extra_manifest)
}

/// Runs an ingest through `ctxhost hook` with the user's HOME at `home`.
fn ingest(p: &TestPlugin, home: &Path) -> Vec<String> {
    let a = p.cmd().env("HOME", home).args(["hook", p.dir.to_str().unwrap(), "ingest"]).write_stdin("{}").assert();
    let a = a.success();
    contents(&reply(&a))
}

/// A user HOME with secrets in it.
fn user_home(root: &Path) -> PathBuf {
    let home = root.join("user");
    write(&home.join(".ssh/id_rsa"), "-----BEGIN OPENSSH PRIVATE KEY----- secret\n");
    write(&home.join(".aws/credentials"), "[default]\naws_secret_access_key = secret\n");
    home
}

#[test]
fn a_hook_writes_only_inside_its_own_dirs() {
    let p = bash_probe(
        "for f in \"$OUTSIDE/escaped\" \"$CTXHOME/grants.toml\" \"$CTXHOME/plugins/other/x\" \"$HOME/.bashrc-x\" \
         \"$USER_HOME/.bashrc-x\" ./own \"$TMPDIR/tmp\" \"$LIBREFANG_DATA/data\" \"$HOME/.librefang/plugins/t/state\" \"$HOME/.librefang/logs/t.log\"; do\n\
         if echo x 2>/dev/null > \"$f\"; then echo \"wrote $f\"; else echo \"denied $f\"; fi\ndone\n\
         echo x > /dev/null && echo 'wrote /dev/null'",
        "",
    );
    let home = user_home(p.root.path());
    let outside = p.root.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::create_dir_all(p.home.join("plugins/other")).unwrap();
    let data = p.home.join("data/t");
    let manifest = std::fs::read_to_string(p.dir.join("plugin.toml")).unwrap().replace(
        "[hooks]",
        &format!(
            "[env]\nOUTSIDE = \"{}\"\nCTXHOME = \"{}\"\nLIBREFANG_DATA = \"{}\"\nUSER_HOME = \"{}\"\n[hooks]",
            outside.display(),
            p.home.display(),
            data.display(),
            home.display()
        ),
    );
    write(&p.dir.join("plugin.toml"), &manifest);
    let lines = ingest(&p, &home);
    let denied: Vec<&str> = lines.iter().filter_map(|l| l.strip_prefix("denied ")).collect();
    let wrote: Vec<&str> = lines.iter().filter_map(|l| l.strip_prefix("wrote ")).collect();
    assert_eq!(denied.len(), 5, "{lines:?}");
    assert_eq!(wrote.len(), 6, "own dir, TMPDIR, data dir, LibreFang store and log, /dev/null: {lines:?}");
    assert!(!outside.join("escaped").exists());
    assert!(!home.join(".bashrc-x").exists() && !p.home.join("hook-home/.bashrc-x").exists());
    assert!(!p.home.join("plugins/other/x").exists());
    assert!(std::fs::read_to_string(p.home.join("grants.toml")).unwrap().contains("[plugins.t]"));
    assert!(p.dir.join("own").exists() && data.join("data").exists());
    // LibreFang's layout, in the hooks' HOME inside ctxhost's home; the
    // user's own home is left as it was.
    let hook_home = p.home.join("hook-home");
    assert!(lines.contains(&format!("wrote {}/.librefang/plugins/t/state", hook_home.display())), "{lines:?}");
    assert!(hook_home.join(".librefang/plugins/t/state").exists() && hook_home.join(".librefang/logs/t.log").exists());
    assert_eq!(entries(&home), [".aws", ".ssh"]);
}

/// The names in `dir`, sorted.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn secrets_in_home_cannot_be_read() {
    // The user's home by its path: the hooks' HOME is another directory.
    let p = bash_probe(
        "for f in \"$USER_HOME/.ssh/id_rsa\" \"$USER_HOME/.aws/credentials\" /etc/hostname; do\n\
         if cat \"$f\" >/dev/null 2>&1; then echo \"read $f\"; else echo \"denied $f\"; fi\ndone\n\
         ls \"$USER_HOME\" >/dev/null 2>&1 && echo 'listed home'",
        "",
    );
    let home = user_home(p.root.path());
    let manifest = std::fs::read_to_string(p.dir.join("plugin.toml"))
        .unwrap()
        .replace("[hooks]", &format!("[env]\nUSER_HOME = \"{}\"\n[hooks]", home.display()));
    write(&p.dir.join("plugin.toml"), &manifest);
    let lines = ingest(&p, &home);
    let expected = [
        format!("denied {}/.ssh/id_rsa", home.display()),
        format!("denied {}/.aws/credentials", home.display()),
        "read /etc/hostname".to_owned(),
    ];
    assert_eq!(lines, expected, "system files readable, the home's secrets and listing not");
}

/// A listener of the test (host network) and a hook that connects to it.
fn connect_probe(extra_manifest: &str) -> (TestPlugin, TcpListener) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let p = bash_probe(
        &format!(
            "if (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null; then echo connected; else echo refused; fi\n\
             ip -o link 2>/dev/null | wc -l"
        ),
        extra_manifest,
    );
    (p, listener)
}

#[test]
fn network_is_denied_unless_granted() {
    let (denied, listener) = connect_probe("");
    let home = user_home(denied.root.path());
    let lines = ingest(&denied, &home);
    assert_eq!(lines[0], "refused", "{lines:?}");
    listener.set_nonblocking(true).unwrap();
    assert!(listener.accept().is_err(), "nothing reached the listener");

    // Granted on first load (the manifest asks, nothing was recorded yet).
    let (allowed, listener) = connect_probe("allow_network = true");
    let lines = ingest(&allowed, &home);
    assert_eq!(lines[0], "connected", "{lines:?}");
    listener.set_nonblocking(true).unwrap();
    assert!(listener.accept().is_ok());
}

/// In one host process, the first call of a plugin makes its own network
/// namespace and later ones share the plugin's (as root): every one of
/// them, on either kind of runtime, is off the host's network.
#[test]
fn every_call_of_a_loaded_plugin_is_off_the_network() {
    use ctxhost::protocol::{HookName, HookRequest};
    use ctxhost::runner::{CallOptions, Runner};
    let (p, listener) = connect_probe("");
    let request = HookRequest::from_json(HookName::Ingest, json!({"agent_id": "a", "message": "m"})).unwrap();
    let current = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let multi = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    for rt in [&current, &multi] {
        // A fresh load: its first call is the one that makes its own namespace.
        let runner = crate::util::load_script(&p.dir, &p.home, &ctxhost::config::HostConfig::default());
        for call in 1..=3 {
            let reply = rt.block_on(runner.call(&request, &CallOptions::default())).unwrap();
            assert_eq!(contents(&reply)[0], "refused", "call {call}: {reply}");
        }
    }
    listener.set_nonblocking(true).unwrap();
    assert!(listener.accept().is_err(), "nothing reached the listener");
    // Each call's TMPDIR is gone soon after its call returned, on both runtimes.
    within(10, "the calls' TMPDIRs to be removed", || {
        let prefix = format!("ctxhost-{}-{}.", p.dir.file_name().unwrap().to_string_lossy(), std::process::id());
        std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .flatten()
            .all(|e| !e.file_name().to_string_lossy().starts_with(&prefix))
    });
}

/// The probe's warning about a partial sandbox names the limits only when
/// a limit is set: without one (the default) a machine without cgroups for
/// ctxhost (an unprivileged user here) has nothing to be warned about.
#[test]
fn limits_kept_without_cgroups_are_warned_about_only_when_a_limit_is_set() {
    let p = bash_probe("echo ran", "");
    let home = user_home(p.root.path());
    let run = || {
        let a = p.cmd().env("HOME", &home).args(["hook", p.dir.to_str().unwrap(), "ingest"]).write_stdin("{}").assert();
        let a = a.success();
        assert_eq!(contents(&reply(&a)), ["ran"]);
        stderr(&a)
    };
    let unlimited = run();
    assert!(!unlimited.contains("missing cgroup"), "no limit is set: {unlimited}");

    write(&p.home.join("config.toml"), "[sandbox]\nmax_processes = 8\n");
    let limited = run();
    let kept_by = ctxhost::runner::process::sandbox::features().limits().process_limit;
    assert_eq!(
        limited.contains("missing cgroup memory limit, cgroup process limit")
            || limited.contains("missing cgroup process limit"),
        !kept_by.starts_with("cgroup"),
        "the process limit is kept by {kept_by}: {limited}"
    );
}

#[test]
fn a_memory_bomb_is_stopped_by_max_memory_mb() {
    // bash builds a 100 MB string.
    let body = "s=$(printf '%*s' 100000000 '') && echo \"built ${#s}\"";
    let bomb = bash_probe(body, "max_memory_mb = 32");
    let home = user_home(bomb.root.path());
    let a =
        bomb.cmd().env("HOME", &home).args(["hook", bomb.dir.to_str().unwrap(), "ingest"]).write_stdin("{}").assert();
    let out = a.get_output();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("built 100000000"), "the limit did not bind: {text} {}", stderr(&a));

    // The same hook with room to spare builds it: the limit is what stopped it.
    let roomy = bash_probe(body, "max_memory_mb = 2048");
    assert_eq!(ingest(&roomy, &home), ["built 100000000"]);
}

/// Python forking up to 60 children that leave the process group with
/// `setsid` and become a sleep carrying `ARG` (a [`Marker`]'s, so the host
/// can find them: the pids the hook sees are its pid namespace's); it waits
/// (bounded) until they all run it, and reports how many it forked and how
/// many it saw running the sleep.
const FORKER: &str = r#"
import json, os, time
ARG = "%ARG%"
pids = []
for _ in range(60):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        try:
            os.setsid()
            os.execvp("sleep", ["sleep", ARG])
        finally:
            os._exit(1)
    pids.append(pid)

def running(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return ARG.encode() in f.read()
    except OSError:
        return False

deadline = time.time() + 10
while time.time() < deadline and not all(running(p) for p in pids):
    time.sleep(0.02)
seen = sum(1 for p in pids if running(p))
print(json.dumps({"memories": [{"content": str(len(pids))}, {"content": str(seen)}]}))
"#;

#[test]
fn processes_are_bounded_and_escapees_die_with_the_call() {
    require_program("python3", "python3");
    let m = Marker::new();
    let manifest = "name = \"forker\"\nversion = \"1\"\n[hooks]\nruntime = \"python\"\ningest = \"hooks/fork.py\"\n";
    let forker = FORKER.replace("%ARG%", &m.arg(120));
    let p = TestPlugin::new("forker", &[("plugin.toml", manifest), ("hooks/fork.py", &forker)]);
    write(&p.home.join("config.toml"), "[sandbox]\nmax_processes = 20\n");
    let lines = ingest(&p, &user_home(p.root.path()));
    let started: usize = lines[0].parse().unwrap();
    assert!(started < 20, "at most 20 processes per call, the hook included: {started}");
    assert!(started > 0, "some forks succeed: {lines:?}");
    assert_eq!(lines[1], lines[0], "every child left the group and ran the marked sleep: {lines:?}");
    let kill = sandbox_kill(&p.home);
    // No pid namespace and no cgroup this user may make (an ordinary user
    // without delegation): the limit held through RLIMIT_NPROC, but
    // children that left the group with `setsid` survive (documented).
    let survivors = left_after_the_call(&m, kill != "none");
    assert!(survivors.is_empty(), "children that called setsid outlived the call: {survivors:?}");

    // Without a limit (the default: no per-call cgroup) all 60 start. With
    // a pid namespace they die with the hook all the same; with neither it
    // nor a cgroup, children that left the group with `setsid` are out of
    // reach (documented) and the test cleans them up itself.
    write(&p.home.join("config.toml"), "[sandbox]\nmax_processes = 0\n");
    let lines = ingest(&p, &user_home(p.root.path()));
    assert_eq!(lines, ["60", "60"]);
    let survivors = left_after_the_call(&m, kill == "pid namespace");
    assert!(survivors.is_empty(), "children that called setsid outlived the call: {survivors:?}");
}

/// The marked processes left after a call that `must_die` (none when they
/// may survive: the test notes how many); kills them either way.
fn left_after_the_call(m: &Marker, must_die: bool) -> Vec<i32> {
    let left = if !must_die {
        eprintln!("nothing here kills setsid escapees: {} outlived the call, as documented", m.pids().len());
        Vec::new()
    } else if m.gone_soon() {
        Vec::new()
    } else {
        m.pids()
    };
    m.kill_all();
    left
}

#[test]
fn a_hook_that_grants_itself_the_filesystem_stays_confined() {
    let p = bash_probe(
        "sed -i 's/^allow_filesystem = false/allow_filesystem = true/' plugin.toml && echo rewrote\n\
         if echo x 2>/dev/null > \"$OUTSIDE/escaped\"; then echo wrote; else echo denied; fi",
        "allow_filesystem = false\n[env]\nOUTSIDE = \"OUT\"",
    );
    let outside = p.root.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let manifest = std::fs::read_to_string(p.dir.join("plugin.toml")).unwrap();
    write(&p.dir.join("plugin.toml"), &manifest.replace("\"OUT\"", &format!("\"{}\"", outside.display())));
    let home = user_home(p.root.path());
    assert_eq!(ingest(&p, &home), ["rewrote", "denied"]);
    assert!(std::fs::read_to_string(p.dir.join("plugin.toml")).unwrap().contains("allow_filesystem = true"));

    // The next call loads the rewritten manifest: the grant still says no.
    let a = p
        .cmd()
        .env("HOME", &home)
        .args(["hook", p.dir.to_str().unwrap(), "ingest"])
        .write_stdin("{}")
        .assert()
        .success();
    assert!(stderr(&a).contains("asks for more than it was granted (allow_filesystem)"), "{}", stderr(&a));
    assert_eq!(contents(&reply(&a)), ["rewrote", "denied"]);
    assert!(!outside.join("escaped").exists());
}

#[test]
fn librefang_style_plugins_keep_their_state_and_logs_sandboxed() {
    require_program("python3", "python3");
    let root = tempfile::tempdir().unwrap();
    let plugins = root.path().join("plugins");
    crate::util::librefang_fixture("notes", &plugins);
    crate::util::librefang_fixture("agentlog", &plugins);
    let home = user_home(root.path());
    let ctx = root.path().join("ctxhost");
    let run = |plugin: &str, hook: &str, input: Value| {
        let a = ctxhost()
            .env("HOME", &home)
            .arg("--home")
            .arg(&ctx)
            .args(["hook", plugins.join(plugin).to_str().unwrap(), hook])
            .write_stdin(input.to_string())
            .assert()
            .success();
        reply(&a)
    };
    let turn = json!({"agent_id": "a1", "messages": [{"role": "user", "content": "My garden has basil"}]});
    for plugin in ["notes", "agentlog"] {
        assert_eq!(run(plugin, "after_turn", turn.clone()), json!({"type": "ok"}));
    }
    let ask = json!({"agent_id": "a1", "message": "what grows in my garden?"});
    assert_eq!(contents(&run("notes", "ingest", ask.clone())), ["note: My garden has basil"]);
    assert_eq!(contents(&run("agentlog", "ingest", ask)), ["turns so far: 1"]);
    let hook_home = ctx.join("hook-home");
    assert!(hook_home.join(".librefang/plugins/notes/store.json").is_file());
    assert!(hook_home.join(".librefang/plugins/agentlog/a1.count").is_file());
    assert_eq!(entries(&home), [".aws", ".ssh"], "nothing in the user's own home");
}

#[test]
fn go_caches_move_into_the_data_dir() {
    require_program("go", "golang-go");
    let p = crate::util::example("go-memory");
    let home = user_home(p.root.path());
    let a = p
        .cmd()
        .env("HOME", &home)
        .args(["hook", p.dir.to_str().unwrap(), "ingest"])
        .write_stdin(r#"{"agent_id":"a","message":"garden"}"#)
        .assert()
        .success();
    assert_eq!(reply(&a)["type"], "ingest_result");
    assert!(p.home.join("data/go-memory/cache/go-build").is_dir(), "GOCACHE is in the plugin's data dir");
    assert!(!home.join(".cache/go-build").exists());
    assert_eq!(entries(&home), [".aws", ".ssh"]);
}

/// How this machine kills a call's processes, as the doctor reports it
/// (`cgroup v2`, `cgroup v1` or `none`).
fn sandbox_kill(home: &Path) -> String {
    let out = ctxhost().arg("--home").arg(home).args(["doctor", "--json"]).output().unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    report["sandbox"]["kill"].as_str().unwrap_or("none").to_owned()
}

#[test]
fn doctor_reports_the_sandbox() {
    let home = tempfile::tempdir().unwrap();
    let out = ctxhost().arg("--home").arg(home.path()).args(["doctor", "--json"]).output().unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let sandbox = &report["sandbox"];
    assert!(sandbox["summary"].as_str().unwrap().contains("landlock"), "{sandbox}");
    assert!(sandbox["landlock_abi"].is_i64() && sandbox["netns"].is_boolean(), "{sandbox}");
    let out = ctxhost().arg("--home").arg(home.path()).arg("doctor").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("\nsandbox: landlock"));
}

/// The core cases again as uid 65534, with a tree that user owns. Skipped
/// (with a note) only when the tests themselves do not run as root: then
/// the cases above already ran unprivileged.
#[test]
fn the_core_cases_hold_for_an_unprivileged_user() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("not root: the other sandbox tests already ran unprivileged");
        return;
    }
    require_program("setpriv", "util-linux");
    let root = tempfile::tempdir().unwrap();
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let home = user_home(root.path());
    let plugins = root.path().join("plugins");
    let outside = root.path().join("outside");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let script = format!(
        "{{\n\
         if echo x 2>/dev/null > \"{out}/escaped\"; then echo wrote-outside; else echo denied-outside; fi\n\
         if cat \"{home}/.ssh/id_rsa\" >/dev/null 2>&1; then echo read-ssh; else echo denied-ssh; fi\n\
         if echo x 2>/dev/null > \"$HOME/.librefang/plugins/t/state\"; then echo wrote-store; else echo denied-store; fi\n\
         if (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null; then echo connected; else echo refused; fi\n\
         id -u\n\
         }} > \"$TMPDIR/r\" 2>/dev/null\n\
         printf '{{\"memories\":[{{\"content\":\"%s\"}}]}}\\n' \"$(tr '\\n' ' ' < \"$TMPDIR/r\")\"\n",
        out = outside.display(),
        home = home.display()
    );
    write(
        &plugins.join("t/plugin.toml"),
        "name = \"t\"\nversion = \"1\"\n[hooks]\nruntime = \"bash\"\ningest = \"hook.sh\"\n",
    );
    write(&plugins.join("t/hook.sh"), &script);
    let bomb = "s=$(printf '%*s' 100000000 '') && echo built\necho '{\"memories\":[]}'\n";
    write(
        &plugins.join("bomb/plugin.toml"),
        "name = \"bomb\"\nversion = \"1\"\nmax_memory_mb = 32\n[hooks]\nruntime = \"bash\"\ningest = \"hook.sh\"\n",
    );
    write(&plugins.join("bomb/hook.sh"), bomb);
    write(
        &plugins.join("forker/plugin.toml"),
        "name = \"forker\"\nversion = \"1\"\n[hooks]\nruntime = \"python\"\ningest = \"hooks/fork.py\"\n",
    );
    let m = Marker::new();
    write(&plugins.join("forker/hooks/fork.py"), &FORKER.replace("%ARG%", &m.arg(120)));
    std::fs::create_dir_all(&outside).unwrap();
    let ctx = root.path().join("ctxhost");
    std::fs::create_dir_all(&ctx).unwrap();
    chown_tree(root.path());

    // ctxhost from a place uid 65534 can reach (the checkout may not be one).
    let bin = root.path().join("bin/ctxhost");
    link_or_copy(&assert_cmd::cargo::cargo_bin("ctxhost"), &bin);
    let as_nobody = |plugin: &str, config: &str| {
        write(&ctx.join("config.toml"), config);
        chown_tree(&ctx);
        let mut cmd = std::process::Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(&bin)
            .arg("--home")
            .arg(&ctx)
            .args(["hook", plugins.join(plugin).to_str().unwrap(), "ingest"])
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", &home);
        crate::util::run_with_empty_request(&mut cmd)
    };

    let (ok, out, err) = as_nobody("t", "");
    assert!(ok, "{out}\n{err}");
    let r: Value = serde_json::from_str(out.trim()).unwrap();
    let seen = contents(&r).join("");
    assert_eq!(
        seen.split_whitespace().collect::<Vec<_>>(),
        ["denied-outside", "denied-ssh", "wrote-store", "refused", "65534"],
        "{err}"
    );
    assert!(!outside.join("escaped").exists());
    listener.set_nonblocking(true).unwrap();
    assert!(listener.accept().is_err());

    let (_, out, err) = as_nobody("bomb", "");
    assert!(!out.contains("built"), "memory limit as an unprivileged user: {out} {err}");

    // What this user's sandbox has, as its doctor reports it.
    let doctor = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(&bin)
        .arg("--home")
        .arg(&ctx)
        .args(["doctor", "--json"])
        .env("HOME", &home)
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&doctor.stdout).unwrap();

    // A process limit binds this user too (a cgroup where delegated, else
    // RLIMIT_NPROC counted in the hook's own user namespace). Children that
    // left the group with `setsid` die with the call (a pid namespace or a
    // cgroup); without either they survive (documented) and the test kills
    // them, found by their marker (the pids the hook sees are its pid
    // namespace's, never the host's).
    let (ok, out, err) = as_nobody("forker", "[sandbox]\nmax_processes = 20\n");
    assert!(ok, "{out}\n{err}");
    let r: Value = serde_json::from_str(out.trim()).unwrap();
    let lines = contents(&r);
    let started: usize = lines[0].parse().unwrap();
    let survivors = left_after_the_call(&m, report["sandbox"]["kill"] != "none");
    assert!(started > 0 && started < 20, "at most 20 processes per call as uid 65534: {started}");
    assert_eq!(lines[1], lines[0], "every child left the group and ran the marked sleep: {lines:?}");
    assert!(survivors.is_empty(), "children that called setsid outlived the call as uid 65534: {survivors:?}");

    // `require = true` refuses exactly when this user's sandbox is partial.
    let full = report["sandbox"]["full"].as_bool().unwrap();
    let (ok, _, err) = as_nobody("t", "[sandbox]\nrequire = true\n");
    assert_eq!(ok, full, "{err}");
    if !full {
        assert!(err.contains("`[sandbox] require = true`"), "{err}");
    }
    assert_eq!(std::fs::read_to_string(ctx.join("hook-home/.librefang/plugins/t/state")).unwrap(), "x\n");
    assert_eq!(entries(&home), [".aws", ".ssh"], "nothing in the user's own home as uid 65534 either");
}

/// This whole module again, as uid 65534 (when the tests run as root; as an
/// ordinary user they already ran unprivileged).
#[test]
fn the_whole_sandbox_suite_passes_as_an_unprivileged_user() {
    crate::util::nobody::rerun_as_nobody(
        "sandbox::",
        &["sandbox::the_whole_sandbox_suite", "sandbox::the_core_cases"],
        &["tests/fixtures", "guest-examples/go-memory"],
        9,
    );
}

/// A plugin's own `[env]` cannot make paths readable: the readable set
/// comes from the host's environment, never from a manifest the plugin
/// could rewrite.
#[test]
fn a_manifests_env_cannot_widen_what_is_readable() {
    // The user's home by its path (the hooks' HOME is another directory).
    let body = "if cat \"$USER_HOME/.ssh/id_rsa\" >/dev/null 2>&1; then echo read-ssh; else echo denied-ssh; fi";
    let p =
        bash_probe(body, "[env]\nPYTHONPATH = \"${SECRETS}\"\nNODE_PATH = \"${SECRETS}\"\nRUBYLIB = \"${SECRETS}\"");
    let home = user_home(p.root.path());
    let manifest = std::fs::read_to_string(p.dir.join("plugin.toml"))
        .unwrap()
        .replace("[hooks]", &format!("USER_HOME = \"{}\"\n[hooks]", home.display()));
    write(&p.dir.join("plugin.toml"), &manifest);
    let a = p
        .cmd()
        .env("HOME", &home)
        .env("SECRETS", home.join(".ssh"))
        .args(["hook", p.dir.to_str().unwrap(), "ingest"])
        .write_stdin("{}")
        .assert()
        .success();
    assert_eq!(contents(&reply(&a)), ["denied-ssh"]);
}

/// A confined hook keeps no capability, even as root: no device nodes, no
/// effective capabilities.
#[test]
fn a_confined_hook_has_no_capabilities() {
    let p = bash_probe(
        "grep '^CapEff' /proc/self/status | tr -d '\\t' \n\
         grep '^CapBnd' /proc/self/status | tr -d '\\t' \n\
         if mknod \"$TMPDIR/disk\" b 8 0 2>/dev/null; then echo made-device; else echo no-device; fi",
        "",
    );
    let lines = ingest(&p, &user_home(p.root.path()));
    assert_eq!(lines, ["CapEff:0000000000000000", "CapBnd:0000000000000000", "no-device"]);
}

// --- `--home` keeps ctxhost inside it ----------------------------------------

/// Counts its calls in LibreFang's place for plugin state.
const KEEPER: &str = "f=\"$HOME/.librefang/plugins/keeper/state.json\"\n\
n=$(tr -dc 0-9 < \"$f\" 2>/dev/null)\nn=$(( ${n:-0} + 1 ))\n\
printf '{\"calls\":%s}\\n' \"$n\" > \"$f\"\n\
echo \"call $n\" >> \"$HOME/.librefang/logs/keeper.log\"\n\
printf '{\"memories\":[{\"content\":\"calls %s\"}]}\\n' \"$n\"\n";

/// Every path below `dir`, depth first.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        out.push(path.clone());
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            walk(&path, out);
        }
    }
}

/// Doctor, `hook`, `run`, `serve` and `sidecar`, each a fresh ctxhost, on a
/// home of three plugins of which only `keeper` is ever called: the user's
/// HOME stays empty, the others leave no directory anywhere, and keeper's
/// LibreFang state lies in the hooks' HOME inside `--home`, found again by
/// every later process.
#[test]
fn home_keeps_everything_ctxhost_makes_inside_it() {
    require_program("python3", "python3");
    let root = tempfile::tempdir().unwrap();
    let (user, ctx, tmp) = (root.path().join("user"), root.path().join("ctx"), root.path().join("tmp"));
    for d in [&user, &tmp] {
        std::fs::create_dir_all(d).unwrap();
    }
    let plugins = ctx.join("plugins");
    let manifest = |name: &str, extra: &str, runtime: &str, script: &str| {
        format!(
            "name = \"{name}\"\nversion = \"1\"\n{extra}\n[hooks]\nruntime = \"{runtime}\"\ningest = \"{script}\"\n"
        )
    };
    write(&plugins.join("keeper/plugin.toml"), &manifest("keeper", "", "bash", "hook.sh"));
    write(&plugins.join("keeper/hook.sh"), KEEPER);
    write(&plugins.join("idle-script/plugin.toml"), &manifest("idle-script", "", "bash", "hook.sh"));
    write(&plugins.join("idle-script/hook.sh"), "touch \"$HOME/idle-script-ran\"\necho '{}'\n");
    write(
        &plugins.join("idle-worker/plugin.toml"),
        &manifest("idle-worker", "persistent_subprocess = true", "python", "hook.py"),
    );
    write(&plugins.join("idle-worker/hook.py"), "import sys\nfor line in sys.stdin:\n    print('{}', flush=True)\n");
    write(&ctx.join("config.toml"), "[context_engine]\nplugin_stack = [\"keeper\"]\n");
    let env = [("HOME", user.to_str().unwrap()), ("TMPDIR", tmp.to_str().unwrap())];
    let cmd = || {
        let mut c = ctxhost();
        c.envs(env).arg("--home").arg(&ctx);
        c
    };
    let state = ctx.join("hook-home/.librefang/plugins/keeper/state.json");
    let calls = || -> u64 {
        let text = std::fs::read_to_string(&state).unwrap_or_default();
        text.trim().trim_start_matches("{\"calls\":").trim_end_matches('}').parse().unwrap_or(0)
    };

    // Loading makes nothing of any plugin's.
    let doctor = cmd().arg("doctor").output().unwrap();
    assert!(doctor.status.success(), "{}", String::from_utf8_lossy(&doctor.stdout));
    let mut all = Vec::new();
    walk(&ctx, &mut all);
    let of_a_plugin: Vec<&PathBuf> = all
        .iter()
        .filter(|p| {
            p.starts_with(ctx.join("data"))
                || p.starts_with(ctx.join("hook-home/.librefang/plugins/"))
                || p.starts_with(ctx.join("hook-home/.librefang/logs"))
        })
        .collect();
    assert!(of_a_plugin.iter().all(|p| p.ends_with("data") || p.ends_with("plugins")), "made at load: {of_a_plugin:?}");

    // One call: keeper's state in the hooks' HOME, inside ctxhost's home.
    let a = cmd()
        .args(["hook", plugins.join("keeper").to_str().unwrap(), "ingest"])
        .write_stdin(r#"{"agent_id":"a1","message":"hi"}"#)
        .assert()
        .success();
    assert_eq!(contents(&reply(&a)), ["calls 1"]);
    assert_eq!(calls(), 1);

    // `run`: every turn goes through keeper, which finds its state again.
    let transcript = root.path().join("chat.jsonl");
    write(
        &transcript,
        "{\"user\":\"I grow basil\",\"assistant\":\"nice\"}\n{\"user\":\"what grows?\",\"assistant\":\"basil\"}\n",
    );
    let out = cmd().args(["run", "--transcript", transcript.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let after_run = calls();
    assert!(after_run >= 3, "one ingest per turn: {after_run}");

    // `serve`: a new process, the same state.
    let d = crate::util::http::Daemon::start(&ctx, &[], &env);
    let r = d.post("/api/agents/a1/ingest", &json!({"message": "basil?"}).to_string());
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains(&format!("calls {}", after_run + 1)), "{}", r.body);
    let (stopped, err) = d.stop();
    assert!(stopped, "{err}");

    // `sidecar` (how LibreFang runs ctxhost): the same home model.
    let mut sidecar = std::process::Command::new(assert_cmd::cargo::cargo_bin("ctxhost"))
        .env_remove("RUST_LOG")
        .env_remove("CTXHOST_HOME")
        .envs(env)
        .arg("--home")
        .arg(&ctx)
        .arg("sidecar")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = sidecar.stdin.take().unwrap();
        let line = json!({"id": 1, "method": "ingest", "params": {"agent_id": "a1", "peer_id": null, "user_message": "basil?"}});
        writeln!(stdin, "{line}").unwrap();
    }
    let out = sidecar.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains(&format!("calls {}", after_run + 2)), "{stdout}");

    // And once more by hand, after all those restarts.
    let a =
        cmd().args(["hook", "keeper", "ingest"]).write_stdin(r#"{"agent_id":"a1","message":"hi"}"#).assert().success();
    assert_eq!(contents(&reply(&a)), [format!("calls {}", after_run + 3)]);
    assert_eq!(calls(), after_run + 3);

    assert_eq!(entries(&user), Vec::<String>::new(), "the user's own HOME stays empty");
    assert_eq!(entries(&tmp), Vec::<String>::new(), "no hook temp dir is left");
    assert_eq!(entries(&ctx.join("data")), ["keeper"]);
    assert_eq!(entries(&ctx.join("hook-home/.librefang/plugins")), ["keeper"]);
    assert!(
        std::fs::read_to_string(ctx.join("hook-home/.librefang/logs/keeper.log")).unwrap().lines().count() as u64
            == calls()
    );
    // The plugins that never ran: nothing of theirs but their own dirs.
    let mut all = Vec::new();
    walk(root.path(), &mut all);
    let traces: Vec<&PathBuf> = all
        .iter()
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().contains("idle")))
        .filter(|p| !p.starts_with(plugins.join("idle-script")) && !p.starts_with(plugins.join("idle-worker")))
        .collect();
    assert!(traces.is_empty(), "{traces:?}");
}

/// State an older ctxhost (or LibreFang) left in the user's own
/// `~/.librefang/plugins/<name>/` is named once when the plugin's new store
/// is made; `[sandbox] hook_home = "~"` shares it instead (the hooks then
/// write there, and only there, in the user's home).
#[test]
fn state_in_the_users_own_home_is_named_or_shared_on_request() {
    let p = bash_probe(
        "cat \"$HOME/.librefang/plugins/t/state\" 2>/dev/null || echo none\n\
         echo new >> \"$HOME/.librefang/plugins/t/state\"",
        "",
    );
    let home = user_home(p.root.path());
    // An empty dir there (what earlier versions made for every plugin they
    // loaded) holds no state: nothing to say.
    std::fs::create_dir_all(home.join(".librefang/plugins/t")).unwrap();
    let a = ctxhost()
        .env("HOME", &home)
        .arg("--home")
        .arg(p.root.path().join("another-home"))
        .args(["hook", p.dir.to_str().unwrap(), "ingest"])
        .write_stdin("{}")
        .assert()
        .success();
    assert!(!stderr(&a).contains("holds state from before"), "{}", stderr(&a));
    write(&home.join(".librefang/plugins/t/state"), "old\n");
    let run = || {
        p.cmd()
            .env("HOME", &home)
            .args(["hook", p.dir.to_str().unwrap(), "ingest"])
            .write_stdin("{}")
            .assert()
            .success()
    };

    let a = run();
    assert_eq!(contents(&reply(&a)), ["none"], "the hooks' HOME is not the user's");
    let warned = stderr(&a);
    assert!(warned.contains("holds state from before") && warned.contains("hook_home = \"~\""), "{warned}");
    assert!(warned.contains(&home.join(".librefang/plugins/t").display().to_string()), "{warned}");
    let a = run();
    assert_eq!(contents(&reply(&a)), ["new"]);
    assert!(!stderr(&a).contains("holds state from before"), "named once, when the new store is made");
    assert_eq!(std::fs::read_to_string(home.join(".librefang/plugins/t/state")).unwrap(), "old\n");

    write(&p.home.join("config.toml"), "[sandbox]\nhook_home = \"~\"\n");
    let a = run();
    assert_eq!(contents(&reply(&a)), ["old"], "shared on request");
    assert_eq!(std::fs::read_to_string(home.join(".librefang/plugins/t/state")).unwrap(), "old\nnew\n");
    assert_eq!(entries(&home.join(".librefang")), ["logs", "plugins"]);
}
