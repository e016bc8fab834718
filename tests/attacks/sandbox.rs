//! Script hooks trying to get out of the sandbox: a granted directory
//! swapped for a symlink, metadata changes on files outside (chmod, chown,
//! utime), running as root, the kernel's attack surface, daemons escaping
//! the call, other processes' `/proc`, descriptors inherited from the
//! daemon. Each test performs the attack through the real `ctxhost` binary
//! and checks its effect. When the tests run as root, the whole module runs
//! again as uid 65534 (the last test).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::util::http::Daemon;
use crate::util::{TestPlugin, reply, require_program, write};

/// The memories' contents of an ingest reply.
fn contents(r: &Value) -> Vec<String> {
    r["memories"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|m| m["source"] != "default")
                .map(|m| m["content"].as_str().unwrap_or("").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// A bash ingest hook whose `body` prints findings, one per line; they come
/// back as memories.
fn probe_script(body: &str) -> String {
    format!(
        "exec 9>&1 1>\"$TMPDIR/lines\" 2>/dev/null\n{body}\nexec 1>&9\nprintf '{{\"memories\":['\nsep=\n\
         while IFS= read -r l; do l=${{l//\\\\/}}; l=${{l//\\\"/}}; printf '%s{{\"content\":\"%s\"}}' \"$sep\" \"$l\"; sep=,; done < \"$TMPDIR/lines\"\n\
         echo ']}}'\n"
    )
}

fn probe(body: &str, extra_manifest: &str) -> TestPlugin {
    TestPlugin::bash("ingest", &probe_script(body), extra_manifest)
}

/// Runs the probe's ingest through `ctxhost hook`.
fn run(p: &TestPlugin) -> Vec<String> {
    let a = p.cmd().args(["hook", p.dir.to_str().unwrap(), "ingest"]).write_stdin("{}").assert().success();
    contents(&reply(&a))
}

/// A directory outside every plugin, with a file the attacker wants.
fn outside(root: &Path) -> PathBuf {
    let dir = root.join("outside");
    write(&dir.join("secret"), "the secret\n");
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(dir.join("secret"), std::fs::Permissions::from_mode(0o600)).unwrap();
    dir
}

/// Item 3. The attacker is granted `writable_paths = ["state"]`, replaces
/// `state` with a symlink to a directory outside during one call, and on
/// the next call of the same running daemon (and after a restart) writes
/// through it. The grant must keep meaning the directory that was checked:
/// nothing appears outside, the secret stays unread.
#[test]
fn a_granted_directory_swapped_for_a_symlink_is_not_followed() {
    let p = TestPlugin::new("t", &[]);
    let out = outside(p.root.path());
    let hook = probe_script(&format!(
        "if [ -d state ] && [ ! -L state ]; then rm -rf state && ln -s {out} state && echo swapped; fi\n\
         if echo pwned 2>/dev/null > state/pwned; then echo wrote-through; else echo write-denied; fi\n\
         if cat state/secret >/dev/null 2>&1; then echo read-through; else echo read-denied; fi",
        out = out.display()
    ));
    write(
        &p.dir.join("plugin.toml"),
        "name = \"t\"\nversion = \"1\"\nwritable_paths = [\"state\"]\n[hooks]\nruntime = \"bash\"\ningest = \"hooks/ingest.sh\"\n",
    );
    write(&p.dir.join("hooks/ingest.sh"), &hook);
    std::fs::create_dir_all(p.dir.join("state")).unwrap();
    write(&p.home.join("config.toml"), "[context_engine]\nplugin = \"t\"\n");
    let daemon = Daemon::start(&p.home, &["--plugins-dir", p.dir.parent().unwrap().to_str().unwrap()], &[]);
    let ingest = || {
        let r = daemon.post("/api/agents/a/ingest", &json!({"message": "hi"}).to_string());
        assert_eq!(r.status, 200, "{}", r.body);
        contents(&r.json())
    };
    let first = ingest();
    assert!(first.contains(&"swapped".to_owned()), "{first:?}");
    assert!(p.dir.join("state").is_symlink());
    let second = ingest();
    assert_eq!(second, ["write-denied", "read-denied"], "the running daemon followed the swapped grant");
    drop(daemon);
    // A restart loads the plugin afresh: the symlink is refused, not followed.
    let a = p.cmd().args(["hook", p.dir.to_str().unwrap(), "ingest"]).write_stdin("{}").assert().success();
    assert_eq!(contents(&reply(&a)), ["write-denied", "read-denied"]);
    let err = crate::util::stderr(&a);
    assert!(err.contains("/state`") && err.contains("symlink"), "the refusal is named: {err}");
    assert!(!out.join("pwned").exists(), "a file appeared outside");
}

/// Item 4. The attacker changes the metadata of files it can name but does
/// not own: ctxhost's `grants.toml` (which Landlock does not let it open,
/// but chmod works on a path) and a file outside — mode, owner, times and
/// extended attributes. Nothing changes.
#[test]
fn metadata_of_files_outside_cannot_be_changed() {
    require_program("python3", "python3");
    let p = TestPlugin::new("t", &[]);
    let out = outside(p.root.path());
    let secret = out.join("secret");
    // First load: the grant is recorded, so grants.toml exists.
    write(
        &p.dir.join("plugin.toml"),
        "name = \"t\"\nversion = \"1\"\n[hooks]\nruntime = \"python\"\ningest = \"hook.py\"\n",
    );
    write(&p.dir.join("hook.py"), "");
    p.cmd().arg("--plugins-dir").arg(p.dir.parent().unwrap()).args(["plugin", "grant", "t"]).assert().success();
    let grants = p.home.join("grants.toml");
    let script = format!(
        r#"import json, os
targets = [{grants:?}, {secret:?}]
found = []
for t in targets:
    for name, act in [("chmod", lambda: os.chmod(t, 0o666)),
                      ("chown", lambda: os.chown(t, os.getuid(), os.getgid())),
                      ("utime", lambda: os.utime(t, (0, 0))),
                      ("setxattr", lambda: os.setxattr(t, "user.pwned", b"1"))]:
        try:
            act(); found.append(name + " changed " + os.path.basename(t))
        except OSError as e:
            found.append(name + " " + str(e.errno))
# What a hook owns stays its own to change.
own = os.path.join(os.environ["TMPDIR"], "own")
open(own, "w").close()
try:
    os.chmod(own, 0o700); found.append("own " + oct(os.stat(own).st_mode & 0o777))
except OSError as e:
    found.append("own " + str(e.errno))
print(json.dumps({{"memories": [{{"content": c}} for c in found]}}))
"#,
        grants = grants.display().to_string(),
        secret = secret.display().to_string()
    );
    write(&p.dir.join("hook.py"), &script);
    let before: Vec<_> = [&grants, &secret].iter().map(|f| std::fs::metadata(f).unwrap()).collect();
    let lines = run(&p);
    let after: Vec<_> = [&grants, &secret].iter().map(|f| std::fs::metadata(f).unwrap()).collect();
    for (b, a) in before.iter().zip(&after) {
        assert_eq!((b.mode(), b.uid(), b.gid(), b.mtime()), (a.mode(), a.uid(), a.gid(), a.mtime()), "{lines:?}");
    }
    assert!(!lines.iter().any(|l| l.contains("changed")), "{lines:?}");
    assert!(lines.iter().filter(|l| l.ends_with(" 1")).count() >= 6, "refused with EPERM: {lines:?}");
    // As root the hook's own uid owns its files, and the kernel's owner
    // check is the rule; as the daemon's user, every change by path is
    // refused (its files are the daemon's too).
    let own = if crate::util::nobody::is_root() { "own 0o700" } else { "own 1" };
    assert!(lines.contains(&own.to_owned()), "{lines:?}");
    for f in [&grants, &secret] {
        assert!(xattr_absent(f), "an xattr was set on {}", f.display());
    }
}

fn xattr_absent(path: &Path) -> bool {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let mut buf = [0u8; 8];
    // SAFETY: getxattr into a local buffer.
    let n = unsafe { libc::getxattr(c.as_ptr(), c"user.pwned".as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    n < 0
}

/// Item 4 (a). As root, a hook must never run as uid 0: it runs as its
/// plugin's own unprivileged uid, has no capability, and cannot read a
/// root-only file in the readable system dirs (`/etc/shadow`-like). Not
/// root, it runs as the daemon's user.
#[test]
fn a_hook_never_runs_as_root() {
    let p = probe(
        "echo \"uid $(id -u) gid $(id -g)\"\n\
         grep '^CapEff' /proc/self/status | tr -d '\\t'\n\
         if cat /etc/shadow >/dev/null 2>&1; then echo read-shadow; else echo shadow-denied; fi\n\
         echo x > ./made-by-hook && echo wrote-own-dir",
        "",
    );
    let lines = run(&p);
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let uid: u32 = lines[0].split(' ').nth(1).unwrap().parse().unwrap();
    if me == 0 {
        assert_ne!(uid, 0, "{lines:?}");
        assert!(uid >= 0x7000_0000, "a uid of the hook range: {lines:?}");
    } else {
        assert_eq!(uid, me, "{lines:?}");
    }
    assert_eq!(lines[1], "CapEff:0000000000000000");
    assert_eq!(lines[2], "shadow-denied");
    assert_eq!(lines[3], "wrote-own-dir");
    assert_eq!(std::fs::metadata(p.dir.join("made-by-hook")).unwrap().uid(), uid, "the file is the hook's");
}

#[cfg(target_arch = "x86_64")]
/// Item 4 (b). The kernel's attack surface: each syscall answers EPERM (or
/// ENOSYS for clone3, so libc falls back) and the hook is not killed; a
/// user namespace is not entered (its `/proc/self/ns/user` is unchanged).
#[test]
fn the_kernels_attack_surface_is_refused() {
    require_program("python3", "python3");
    let p = TestPlugin::new("t", &[]);
    write(
        &p.dir.join("plugin.toml"),
        "name = \"t\"\nversion = \"1\"\n[hooks]\nruntime = \"python\"\ningest = \"hook.py\"\n",
    );
    write(&p.dir.join("hook.py"), SYSCALLS);
    let lines = run(&p);
    for (name, expected) in [
        ("ptrace", "1"),
        ("process_vm_readv", "1"),
        ("bpf", "1"),
        ("perf_event_open", "1"),
        ("keyctl", "1"),
        ("add_key", "1"),
        ("io_uring_setup", "1"),
        ("mount", "1"),
        ("umount2", "1"),
        ("pivot_root", "1"),
        ("init_module", "1"),
        ("kexec_load", "1"),
        ("unshare_user", "1"),
        ("setns", "1"),
        ("userfaultfd", "1"),
        ("clone3", "38"),
    ] {
        let line = lines.iter().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_else(|| panic!("{lines:?}"));
        assert_eq!(line, &format!("{name} {expected}"), "errno of {name}: {lines:?}");
    }
    assert!(lines.contains(&"userns unchanged".to_owned()), "{lines:?}");
}

#[cfg(target_arch = "x86_64")]
const SYSCALLS: &str = r#"import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NR = {"ptrace": 101, "process_vm_readv": 310, "bpf": 321, "perf_event_open": 298, "keyctl": 250,
      "add_key": 248, "io_uring_setup": 425, "mount": 165, "umount2": 166, "pivot_root": 155,
      "init_module": 175, "kexec_load": 246, "setns": 308, "userfaultfd": 323, "clone3": 435}
found = []
def call(name, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(NR[name]), *[ctypes.c_long(a) for a in args])
    found.append(f"{name} {ctypes.get_errno() if r < 0 else 'succeeded'}")
buf = ctypes.create_string_buffer(64)
call("ptrace", 16, os.getppid() or 1, 0, 0)        # PTRACE_ATTACH
call("process_vm_readv", 1, 0, 0, 0, 0, 0)
call("bpf", 0, ctypes.addressof(buf), 64)
call("perf_event_open", ctypes.addressof(buf), 0, -1, -1, 0)
call("keyctl", 0, -3, 0)
call("add_key", ctypes.addressof(ctypes.create_string_buffer(b"user")), ctypes.addressof(ctypes.create_string_buffer(b"k")), 0, 0, -3)
call("io_uring_setup", 1, ctypes.addressof(ctypes.create_string_buffer(120)))
call("mount", 0, ctypes.addressof(ctypes.create_string_buffer(b"/tmp")), ctypes.addressof(ctypes.create_string_buffer(b"tmpfs")), 0, 0)
call("umount2", ctypes.addressof(ctypes.create_string_buffer(b"/proc")), 2)
call("pivot_root", ctypes.addressof(ctypes.create_string_buffer(b"/")), ctypes.addressof(ctypes.create_string_buffer(b"/")))
call("init_module", 0, 0, 0)
call("kexec_load", 0, 0, 0, 0)
before = os.readlink("/proc/self/ns/user")
ctypes.set_errno(0)
r = libc.unshare(0x10000000)
found.append(f"unshare_user {ctypes.get_errno() if r < 0 else 'succeeded'}")
found.append("userns " + ("unchanged" if os.readlink("/proc/self/ns/user") == before else "changed"))
fd = os.open("/proc/self/ns/net", os.O_RDONLY)
call("setns", fd, 0)
call("userfaultfd", 0)
call("clone3", ctypes.addressof(ctypes.create_string_buffer(88)), 88)
print(json.dumps({"memories": [{"content": c} for c in found]}))
"#;

/// Item 10. A hook starts a daemon that leaves its process group and
/// session (`setsid`, double fork) and writes a heartbeat; the call ends.
/// The daemon must be dead: no process with its marker runs, and the
/// heartbeat file stops growing.
#[test]
fn a_daemon_escaping_the_call_dies_with_it() {
    // A marker no other run on this machine uses (the catalogue runs as root
    // and as 65534 at once, other checkouts may run it too).
    let marker =
        format!("61.{}{:09}", std::process::id(), std::time::SystemTime::UNIX_EPOCH.elapsed().unwrap().subsec_nanos());
    let p = probe(
        &format!(
            "beat=\"$PWD/beat\"\n\
             setsid bash -c \"(while :; do echo . >> '$beat'; sleep 0.05; done) & exec sleep {marker}\" </dev/null >/dev/null 2>&1 &\n\
             sleep 0.3; echo started"
        ),
        "",
    );
    assert_eq!(run(&p), ["started"]);
    let beat = p.dir.join("beat");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let size = std::fs::metadata(&beat).map(|m| m.len()).unwrap_or(0);
    assert!(size > 0, "the daemon ran during the call");
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(std::fs::metadata(&beat).map(|m| m.len()).unwrap_or(0), size, "the escaped daemon still writes");
    let left = std::process::Command::new("pgrep").args(["-f", &marker]).output().unwrap();
    assert!(left.stdout.is_empty(), "left running: {}", String::from_utf8_lossy(&left.stdout));
}

/// Item 11. The daemon runs with a token on its command line and a secret
/// in its environment (and another process of the test holds a secret in
/// its argv); a hook reads every `/proc/<pid>/cmdline` and `environ` it can
/// find. It sees only its own processes: no
/// token, no secret, and it runs in a namespace of its own.
#[test]
fn other_processes_are_invisible_in_proc() {
    let p = TestPlugin::new("t", &[]);
    let hook = probe_script(
        "cat /proc/[0-9]*/cmdline /proc/[0-9]*/environ 2>/dev/null | tr '\\0' ' ' | grep -o 'tok[-][a-z0-9]*\\|argv[-]secret[-][0-9]*' | sort -u\n\
         echo \"self $$ procs $(ls -d /proc/[0-9]* | wc -l)\"",
    );
    write(
        &p.dir.join("plugin.toml"),
        "name = \"t\"\nversion = \"1\"\n[hooks]\nruntime = \"bash\"\ningest = \"hooks/ingest.sh\"\n",
    );
    write(&p.dir.join("hooks/ingest.sh"), &hook);
    write(&p.home.join("config.toml"), "[context_engine]\nplugin = \"t\"\n");
    let mut bystander = std::process::Command::new("sh").args(["-c", "sleep 30", "argv-secret-4711"]).spawn().unwrap();
    let daemon = Daemon::start(
        &p.home,
        &["--plugins-dir", p.dir.parent().unwrap().to_str().unwrap(), "--token", "tok-s3cretvalue"],
        &[("SOME_SECRET", "tok-inenvironment")],
    );
    let r = daemon.post_with(
        "/api/agents/a/ingest",
        &json!({"message": "hi"}).to_string(),
        &[("authorization", "Bearer tok-s3cretvalue")],
    );
    let _ = bystander.kill();
    let _ = bystander.wait();
    assert_eq!(r.status, 200, "{}", r.body);
    let lines = contents(&r.json());
    assert!(!lines.iter().any(|l| l.contains("tok-") || l.contains("argv-secret")), "{lines:?}");
    let procs = lines.iter().find_map(|l| l.strip_prefix("self ")).unwrap_or_else(|| panic!("{lines:?}"));
    let (pid, count) = procs.split_once(" procs ").unwrap();
    assert_eq!(pid, "2", "the hook is pid 2 of its own namespace (its init is 1): {lines:?}");
    assert!(count.trim().parse::<u32>().unwrap() <= 8, "only its own processes: {lines:?}");
}

/// Item 11 (the other half): the token can come from a file, and then it is
/// on no command line at all.
#[test]
fn the_token_can_come_from_a_file_off_the_command_line() {
    let p = TestPlugin::new("t", &[]);
    let file = p.root.path().join("token");
    write(&file, "tok-fromfile42\n");
    let daemon = Daemon::start(&p.home, &["--token-file", file.to_str().unwrap()], &[]);
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", daemon.pid())).unwrap();
    assert!(!String::from_utf8_lossy(&cmdline).contains("tok-fromfile42"));
    let denied = daemon.post("/api/agents/a/ingest", "{\"message\":\"x\"}");
    assert_eq!(denied.status, 401);
    let allowed =
        daemon.post_with("/api/agents/a/ingest", "{\"message\":\"x\"}", &[("authorization", "Bearer tok-fromfile42")]);
    assert_eq!(allowed.status, 200, "{}", allowed.body);
}

/// Item 12. ctxhost inherits an fd without close-on-exec (fd 7, open for
/// writing on a file outside); a hook writes to fd 7 and through
/// `/proc/self/fd/7`. The file stays unchanged, and the hook holds no fd
/// above 2 but the ones it opened itself.
#[test]
fn descriptors_inherited_by_the_daemon_do_not_reach_hooks() {
    use std::os::unix::process::CommandExt;
    let p = probe(
        "if echo pwned >&7; then echo wrote-fd7; else echo no-fd7; fi\n\
         if echo pwned > /proc/self/fd/7; then echo wrote-proc-fd7; else echo no-proc-fd7; fi",
        "",
    );
    let out = outside(p.root.path());
    let target = out.join("target");
    write(&target, "clean\n");
    let file = std::fs::OpenOptions::new().write(true).open(&target).unwrap();
    let raw = std::os::fd::AsRawFd::as_raw_fd(&file);
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("ctxhost"));
    cmd.arg("--home")
        .arg(&p.home)
        .arg("--plugins-dir")
        .arg(p.dir.parent().unwrap())
        .args(["hook", p.dir.to_str().unwrap(), "ingest"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    // SAFETY: dup2 in the child before exec: fd 7 without close-on-exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(raw, 7) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    drop(child.stdin.take());
    let output = child.wait_with_output().unwrap();
    let reply: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(contents(&reply), ["no-fd7", "no-proc-fd7"]);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "clean\n");
}

// ---- nothing of a hook outlives the ctxhost that started it ------------------

/// What a SIGKILLed ctxhost must not leave running: the processes carrying
/// `marker` (the hook's sleeps) and those with `root` — the test's temporary
/// directory — in their argv (the hook's own script, a keeper: a copy of
/// ctxhost that kept its `--home`). Whatever is left is killed when dropped.
struct Leftovers {
    marker: crate::util::procs::Marker,
    root: String,
}

impl Leftovers {
    fn new(root: &Path) -> Leftovers {
        Leftovers { marker: crate::util::procs::Marker::new(), root: root.to_str().unwrap().to_owned() }
    }

    /// A hook body: a grandchild that leaves the hook's session and sleeps,
    /// then a sleep of the hook's own (both marked).
    fn sleeper(&self) -> String {
        format!("setsid {} </dev/null >/dev/null 2>&1 &\n{}\n", self.marker.sleep(61), self.marker.sleep(62))
    }

    fn pids(&self) -> Vec<i32> {
        let mut pids = self.marker.pids();
        pids.extend(crate::util::procs::pids_with_arg(&self.root));
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// Waits (bounded) until both sleeps run; `diagnose` says why not.
    fn wait_running(&self, what: &str, diagnose: impl FnOnce() -> String) {
        if !self.marker.running(2, std::time::Duration::from_secs(30)) {
            panic!("{what}: the hook's sleeps never ran: {}", diagnose());
        }
    }

    /// Kills `host` (SIGKILL), then asserts that nothing is left within 2 s:
    /// no marked process, and none of the processes between them and the
    /// host (a keeper and a pid namespace's init have no argv to find them by).
    fn kill_host_and_check(&self, host: i32, what: &str) {
        let mut watched: Vec<i32> = self.pids().into_iter().filter(|&pid| pid != host).collect();
        for pid in watched.clone() {
            let mut at = pid;
            while let Some(parent) = crate::util::procs::parent_of(at).filter(|&p| p > 1 && p != host) {
                watched.push(parent);
                at = parent;
            }
        }
        watched.sort_unstable();
        watched.dedup();
        // SAFETY: kill(2) on the test's own child process.
        assert_eq!(unsafe { libc::kill(host, libc::SIGKILL) }, 0);
        let alive = || -> Vec<i32> {
            let mut alive: Vec<i32> = watched.iter().copied().filter(|&pid| !crate::util::is_dead(pid)).collect();
            alive.extend(self.pids());
            alive.sort_unstable();
            alive.dedup();
            alive
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while !alive().is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let left: Vec<String> = alive()
            .into_iter()
            .map(|pid| {
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                format!("{pid}: {}", String::from_utf8_lossy(&cmdline).replace('\0', " "))
            })
            .collect();
        assert!(left.is_empty(), "{what}: still running 2 s after ctxhost was SIGKILLed:\n{}", left.join("\n"));
    }
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        for pid in self.pids() {
            // SAFETY: kill(2) on processes this test's hooks (or daemon) started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// Sends an ingest to `daemon` without waiting for the answer (the call
/// must still run when the daemon is killed).
fn ingest_in_background(daemon: &Daemon) -> std::net::TcpStream {
    use std::io::Write;
    let body = json!({"message": "hi"}).to_string();
    let mut stream = std::net::TcpStream::connect(&daemon.addr).unwrap();
    let head = format!(
        "POST /api/agents/a/ingest HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        daemon.addr,
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body.as_bytes()).unwrap();
    stream
}

/// What the daemon answered to [`ingest_in_background`] (a call that should
/// still run: a test failing tells why it did not).
fn answer(mut call: &std::net::TcpStream) -> String {
    use std::io::Read;
    let _ = call.set_read_timeout(Some(std::time::Duration::from_secs(5)));
    let mut raw = Vec::new();
    let _ = call.read_to_end(&mut raw);
    String::from_utf8_lossy(&raw).into_owned()
}

/// A `ctxhost serve` home whose context engine is the plugin `t` in `p`.
fn serve_plugin(p: &TestPlugin) -> Daemon {
    serve_plugin_with(p, |_| {})
}

fn serve_plugin_with(p: &TestPlugin, prepare: impl FnOnce(&mut std::process::Command)) -> Daemon {
    write(&p.home.join("config.toml"), "[context_engine]\nplugin = \"t\"\n");
    Daemon::start_with(&p.home, &["--plugins-dir", p.dir.parent().unwrap().to_str().unwrap()], &[], prepare)
}

/// Orphans. A one-shot hook is running — sleeping, with a grandchild that
/// left its session (`setsid`) — when `ctxhost serve` is SIGKILLed. Nothing
/// of it may outlive the daemon (an after_turn replayed at the restart
/// would otherwise run beside its orphan): every process is gone within 2 s.
#[test]
fn a_hook_running_when_serve_is_killed_dies_with_it() {
    one_shot_killed_with_serve("", "serve, one-shot");
}

/// Orphans, the operator's trusted plugin (granted both the filesystem and
/// the network: no namespace, no sandbox layer): its one-shot hook and the
/// grandchild in a session of its own die with a SIGKILLed `ctxhost serve`
/// all the same.
#[test]
fn a_trusted_hook_running_when_serve_is_killed_dies_with_it() {
    one_shot_killed_with_serve("allow_filesystem = true\nallow_network = true\n", "serve, trusted one-shot");
}

/// A one-shot sleeper plugin (`settings` added to its manifest) under
/// `ctxhost serve`, the daemon SIGKILLed during the call.
fn one_shot_killed_with_serve(settings: &str, what: &str) {
    let p = TestPlugin::new("t", &[]);
    let left = Leftovers::new(p.root.path());
    write(
        &p.dir.join("plugin.toml"),
        &format!("name = \"t\"\nversion = \"1\"\n{settings}[hooks]\nruntime = \"bash\"\ningest = \"ingest.sh\"\n"),
    );
    write(&p.dir.join("ingest.sh"), &format!("{}echo '{{\"memories\":[]}}'\n", left.sleeper()));
    let daemon = serve_plugin(&p);
    let call = ingest_in_background(&daemon);
    left.wait_running(what, || answer(&call));
    left.kill_host_and_check(daemon.pid(), what);
}

/// Orphans, the persistent worker: a worker busy with a call (sleeping,
/// its grandchild in a session of its own) when `ctxhost serve` is
/// SIGKILLed. The worker and everything it started are gone within 2 s.
#[test]
fn a_worker_running_when_serve_is_killed_dies_with_it() {
    let p = TestPlugin::new("t", &[]);
    let left = Leftovers::new(p.root.path());
    write(
        &p.dir.join("plugin.toml"),
        "name = \"t\"\nversion = \"1\"\n[hooks]\nruntime = \"bash\"\npersistent_subprocess = true\ningest = \"worker.sh\"\n",
    );
    write(
        &p.dir.join("worker.sh"),
        &format!("while IFS= read -r line; do\n{}echo '{{\"memories\":[]}}'\ndone\n", left.sleeper()),
    );
    let daemon = serve_plugin(&p);
    let call = ingest_in_background(&daemon);
    left.wait_running("serve, worker", || answer(&call));
    left.kill_host_and_check(daemon.pid(), "serve, worker");
}

/// Orphans, the sidecar: LibreFang SIGKILLs its `ctxhost sidecar` while a
/// hook runs (sleeping, its grandchild in a session of its own). Nothing of
/// the hook is left 2 s later.
#[test]
fn a_hook_running_when_the_sidecar_is_killed_dies_with_it() {
    use std::io::Write;
    let root = tempfile::tempdir().unwrap();
    let left = Leftovers::new(root.path());
    let home = root.path().join("ctxhost");
    let dir = home.join("plugins/t");
    write(
        &dir.join("plugin.toml"),
        "name = \"t\"\nversion = \"1\"\n[hooks]\nruntime = \"bash\"\ningest = \"ingest.sh\"\n",
    );
    write(&dir.join("ingest.sh"), &format!("{}echo '{{\"memories\":[]}}'\n", left.sleeper()));
    write(&home.join("config.toml"), "[context_engine]\nplugin = \"t\"\n");
    std::fs::create_dir_all(root.path().join("user")).unwrap();
    let mut sidecar = std::process::Command::new(assert_cmd::cargo::cargo_bin("ctxhost"))
        .env_remove("RUST_LOG")
        .env_remove("CTXHOST_HOME")
        .env_remove("CTXHOST_PLUGINS_DIR")
        .env("HOME", root.path().join("user"))
        .arg("sidecar")
        .arg("--home")
        .arg(&home)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = sidecar.stdin.take().unwrap();
    let bootstrap = r#"{"id":1,"method":"bootstrap","params":{"context_window_tokens":200000,"max_recall_results":5,"stable_prefix_mode":false}}"#;
    let ingest =
        json!({"id": 2, "method": "ingest", "params": {"agent_id": "a", "peer_id": null, "user_message": "hi"}});
    writeln!(stdin, "{bootstrap}\n{ingest}").unwrap();
    stdin.flush().unwrap();
    left.wait_running("sidecar", || "(the sidecar's replies are not read)".into());
    left.kill_host_and_check(sidecar.id() as i32, "sidecar");
    let _ = sidecar.wait();
}

/// Orphans, on a machine without namespaces (no pid namespace to end with
/// its init: the daemon runs under a seccomp filter refusing `unshare`,
/// `setns` and namespace flags to `clone`, as an unprivileged user without
/// user namespaces would be). A one-shot hook is running, with a grandchild
/// in a session of its own, when the daemon is SIGKILLed: everything is
/// gone within 2 s.
#[test]
fn a_hook_of_a_daemon_without_namespaces_dies_with_it() {
    let p = TestPlugin::new("t", &[]);
    // As root the hook runs as its plugin's uid, with no covers to reach
    // its files through: the way there must be open.
    std::fs::set_permissions(p.root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let left = Leftovers::new(p.root.path());
    write(
        &p.dir.join("plugin.toml"),
        "name = \"t\"\nversion = \"1\"\n[hooks]\nruntime = \"bash\"\ningest = \"ingest.sh\"\n",
    );
    write(&p.dir.join("ingest.sh"), &format!("{}echo '{{\"memories\":[]}}'\n", left.sleeper()));
    let filters = no_namespaces_filters();
    let daemon = serve_plugin_with(&p, move |cmd| install_before_exec(cmd, filters));
    let call = ingest_in_background(&daemon);
    if !left.marker.running(2, std::time::Duration::from_secs(30)) {
        let answer = answer(&call);
        let (_, stderr) = daemon.stop();
        panic!("no namespaces: the hook's sleeps never ran: {answer}\n{stderr}");
    }
    left.kill_host_and_check(daemon.pid(), "no namespaces");
    let (_, stderr) = daemon.stop();
    assert!(stderr.contains("pidns no"), "the daemon ran without pid namespaces: {stderr}");
}

/// `unshare`, `setns` and `clone` with a namespace flag refused (EPERM);
/// `clone3` "missing" (ENOSYS: the C library falls back to `clone`).
fn no_namespaces_filters() -> Vec<seccompiler::BpfProgram> {
    use seccompiler::{SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule};
    let arch = seccompiler::TargetArch::try_from(std::env::consts::ARCH).unwrap();
    let flag = |f: libc::c_int| {
        let f = f as u64;
        SeccompRule::new(vec![SeccompCondition::new(0, SeccompCmpArgLen::Qword, SeccompCmpOp::MaskedEq(f), f).unwrap()])
            .unwrap()
    };
    let namespaces = [libc::CLONE_NEWUSER, libc::CLONE_NEWPID, libc::CLONE_NEWNET, libc::CLONE_NEWNS];
    let deny = std::collections::BTreeMap::from([
        (libc::SYS_unshare, Vec::new()),
        (libc::SYS_setns, Vec::new()),
        (libc::SYS_clone, namespaces.into_iter().map(flag).collect()),
    ]);
    let clone3 = std::collections::BTreeMap::from([(libc::SYS_clone3, Vec::new())]);
    [(clone3, libc::ENOSYS), (deny, libc::EPERM)]
        .into_iter()
        .map(|(rules, errno)| {
            let filter =
                SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(errno as u32), arch).unwrap();
            seccompiler::BpfProgram::try_from(filter).unwrap()
        })
        .collect()
}

/// The probe cache `ctxhost hook` keeps in `<home>/cache/`.
fn probe_cache(p: &TestPlugin) -> PathBuf {
    p.home.join("cache/sandbox-features.json")
}

/// The features the probe cache at `path` claims, sorted.
fn cache_claims(path: &Path) -> Vec<String> {
    let file: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut claims: Vec<String> =
        file["claims"].as_array().unwrap().iter().map(|c| c.as_str().unwrap().to_owned()).collect();
    claims.sort();
    claims
}

/// The cache file at `path` with its claims replaced (its key kept: the
/// forger knows the machine) and `extra` fields added.
fn forge_cache(path: &Path, claims: &[&str], extra: Value) {
    let mut file: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    file["claims"] = json!(claims);
    for (k, v) in extra.as_object().unwrap() {
        file[k] = v.clone();
    }
    write(path, &file.to_string());
}

/// A hook that tries to write outside, to reach a listener of the host's
/// network and counts the processes it sees (its pid namespace's, or all).
fn escape_probe(root: &Path, port: u16) -> TestPlugin {
    let outside = outside(root);
    let body = format!(
        "if echo x 2>/dev/null > \"{out}/escaped\"; then echo wrote-outside; else echo denied-outside; fi\n\
         if (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null; then echo connected; else echo refused; fi\n\
         n=0; for d in /proc/[0-9]*; do n=$((n+1)); done; echo \"processes $n\"\n\
         echo ran >> ./ran",
        out = outside.display()
    );
    let p = probe(&body, "");
    // As root the hook runs as its plugin's uid: the way to its dir must be open.
    std::fs::set_permissions(p.root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// The probe cache forged to claim less. `ctxhost hook` keeps what the
/// sandbox probe found (a network, a pid, a user namespace can be made) in
/// `<home>/cache/`; an attacker who can write there — a trusted plugin,
/// another process of the user — rewrites it to say this machine has none
/// of them, or adds fields saying Landlock and seccomp are missing, or
/// corrupts it, hoping hooks then run on the host's network and see every
/// process. Every run must confine exactly as before the forgery: the write
/// outside denied, the listener never reached, the same processes seen —
/// and the cache is rewritten with what the live probe found.
#[test]
fn a_probe_cache_forged_to_claim_less_does_not_unconfine_hooks() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let root = tempfile::tempdir().unwrap();
    let p = escape_probe(root.path(), listener.local_addr().unwrap().port());
    let cache = probe_cache(&p);
    let honest = run(&p);
    assert_eq!(honest[..2], ["denied-outside", "refused"], "{honest:?}");
    assert!(cache.is_file(), "the first run keeps what it probed");
    let claimed = cache_claims(&cache);
    // What the live probe says this machine has (doctor never reads the cache).
    let doctor = p.cmd().args(["doctor", "--json"]).output().unwrap();
    let report: Value = serde_json::from_slice(&doctor.stdout).unwrap();
    let f = &report["sandbox"];
    let mut present: Vec<String> = ["userns", "netns", "pidns"]
        .into_iter()
        .filter(|n| f[*n] == true && !(*n == "userns" && f["root"] == true))
        .map(str::to_owned)
        .collect();
    present.sort();
    assert_eq!(claimed, present, "the cache claims exactly what the probe found: {report}");
    assert!(present.contains(&"netns".to_owned()), "the network is denied here by a namespace: {report}");

    for what in ["claims nothing", "says every layer is missing", "claims names it does not know", "is corrupt"] {
        match what {
            "claims nothing" => forge_cache(&cache, &[], json!({})),
            "says every layer is missing" => forge_cache(
                &cache,
                &[],
                json!({"netns": false, "pidns": false, "userns": false, "landlock_abi": 0, "seccomp": false,
                       "missing": ["landlock", "network namespace", "seccomp"]}),
            ),
            "claims names it does not know" => forge_cache(&cache, &["landlock", "nonetns", "none"], json!({})),
            _ => write(&cache, "{\"claims\": [], \"netns\": fal"),
        }
        let lines = run(&p);
        assert_eq!(lines, honest, "a cache that {what}: the hook must be confined as before");
        assert!(listener.accept().is_err(), "a cache that {what}: the hook reached the host's network");
        assert!(!root.path().join("outside/escaped").exists(), "a cache that {what}: wrote outside");
        assert_eq!(cache_claims(&cache), present, "a cache that {what} is rewritten from the live probe");
    }
    let runs = std::fs::read_to_string(p.dir.join("ran")).unwrap();
    assert_eq!(runs.lines().count(), 5, "every run ran the hook: {runs}");
}

/// Runs `ctxhost hook` for `p`'s ingest on a machine without namespaces (a
/// seccomp filter refusing them, as in a container that forbids them):
/// (success, stdout, stderr).
fn hook_without_namespaces(p: &TestPlugin) -> (bool, String, String) {
    let filters = no_namespaces_filters();
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("ctxhost"));
    cmd.arg("--home").arg(&p.home).args(["hook", p.dir.to_str().unwrap(), "ingest"]);
    cmd.env_remove("RUST_LOG").env_remove("CTXHOST_HOME").env_remove("CTXHOST_PLUGINS_DIR");
    install_before_exec(&mut cmd, filters);
    crate::util::run_with_empty_request(&mut cmd)
}

/// Installs seccomp `filters` in `cmd`'s child before it execs (with
/// `no_new_privs`, as an unprivileged process must).
fn install_before_exec(cmd: &mut std::process::Command, filters: Vec<seccompiler::BpfProgram>) {
    use std::os::unix::process::CommandExt;
    // SAFETY: only prctl and the seccomp syscall on programs compiled in the parent.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            for program in &filters {
                let fprog = libc::sock_fprog {
                    len: program.len() as u16,
                    filter: program.as_ptr().cast::<libc::sock_filter>().cast_mut(),
                };
                let fprog: *const libc::sock_fprog = &fprog;
                if libc::syscall(libc::SYS_seccomp, libc::SECCOMP_SET_MODE_FILTER, 0, fprog) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// The probe cache forged to claim more than the machine has. On a machine
/// where no namespace can be made (a seccomp filter refusing them, as some
/// container runtimes do) the cache is rewritten to claim a user, a network
/// and a pid namespace, hoping ctxhost trusts it halfway — plans a network
/// namespace, fails to make it, and runs the hook anyway. The start must
/// fail loudly instead: the hook never runs (its marker unchanged, nothing
/// reaches the listener), the error names the cache, the cache is removed,
/// and the next run probes live again.
#[test]
fn a_probe_cache_forged_to_claim_more_fails_closed() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let root = tempfile::tempdir().unwrap();
    let p = escape_probe(root.path(), listener.local_addr().unwrap().port());
    let cache = probe_cache(&p);
    // The honest run on this namespace-less machine: a partial sandbox, as
    // without the cache (warned; `[sandbox] require` would refuse it).
    let (ok, out, err) = hook_without_namespaces(&p);
    assert!(ok, "{out}\n{err}");
    assert!(err.contains("network namespace"), "the partial sandbox is reported: {err}");
    assert_eq!(cache_claims(&cache), Vec::<String>::new(), "nothing can be claimed here");
    while listener.accept().is_ok() {}

    forge_cache(&cache, &["userns", "netns", "pidns"], json!({}));
    let (ok, out, err) = hook_without_namespaces(&p);
    assert!(!ok, "a cache claiming namespaces this machine lacks must not run the hook: {out}\n{err}");
    assert!(err.contains("probe cache") && err.contains("sandbox-features.json"), "the error names the cache: {err}");
    assert!(out.trim().is_empty(), "no reply: {out}");
    assert!(listener.accept().is_err(), "the hook must not have run at all");
    let runs = std::fs::read_to_string(p.dir.join("ran")).unwrap();
    assert_eq!(runs.lines().count(), 1, "only the honest run ran the hook: {runs}");
    assert!(!cache.exists(), "the stale cache is removed");

    // The next run probes live, as the first did.
    let (ok, out, err) = hook_without_namespaces(&p);
    assert!(ok, "{out}\n{err}");
    assert_eq!(cache_claims(&cache), Vec::<String>::new());
    assert_eq!(std::fs::read_to_string(p.dir.join("ran")).unwrap().lines().count(), 2);
}
