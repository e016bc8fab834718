//! The operator's trusted plugin (granted both the filesystem and the
//! network: no sandbox layer) in a process that makes many calls: its
//! keeper starts sharing ctxhost's memory instead of being forked
//! (`sandbox::shared`). These tests check that by effect — the keeper's
//! address space is ctxhost's, and nothing of ctxhost's memory changes —
//! and that what the keeper promises still holds when a hook attacks it:
//! a daemon leaving its session dies with the call, a hook killing its
//! keeper dies with it and ctxhost carries on, a dropped or timed-out call
//! leaves no process and no zombie, exit codes and signals come through as
//! for a spawned hook, and concurrent calls each get their own reply. The
//! module runs again as uid 65534 when the tests run as root.

use std::path::Path;
use std::time::{Duration, Instant};

use ctxhost::protocol::{HookName, HookRequest};
use ctxhost::runner::{CallOptions, HookError, Runner};
use serde_json::{Value, json};

use crate::util::procs::Marker;
use crate::util::{TestPlugin, within, write};

/// The grants that make a plugin the operator's trusted one.
const TRUSTED: &str = "allow_filesystem = true\nallow_network = true\n";

/// The reply a hook prints when it has nothing to say.
const EMPTY: &str = "echo '{\"memories\":[]}'";

/// A trusted bash plugin whose ingest hook is `body`, loaded as a daemon loads it.
fn trusted(body: &str) -> (TestPlugin, ctxhost::runner::process::ProcessRunner) {
    let p = TestPlugin::bash("ingest", body, TRUSTED);
    let runner = crate::util::load_script(&p.dir, &p.home, &ctxhost::config::HostConfig::default());
    (p, runner)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn ingest(agent: &str) -> HookRequest {
    HookRequest::from_json(HookName::Ingest, json!({"agent_id": agent, "message": "m"})).unwrap()
}

fn contents(r: &Value) -> Vec<String> {
    r["memories"].as_array().unwrap().iter().map(|m| m["content"].as_str().unwrap().to_owned()).collect()
}

/// No process `pid` at all (reaped, not a zombie).
fn gone(pid: i32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
}

/// The pid a hook wrote into `file` (waits for it, bounded).
fn pid_in(file: &Path) -> i32 {
    within(10, &format!("the hook to write {}", file.display()), || {
        std::fs::read_to_string(file).is_ok_and(|s| s.ends_with('\n'))
    });
    std::fs::read_to_string(file).unwrap().trim().parse().unwrap()
}

/// `kcmp(KCMP_VM)`: 0 when the two processes share one address space.
fn same_memory(a: i32, b: i32) -> i64 {
    // SAFETY: kcmp(2) compares two processes' memory; no pointer involved.
    unsafe {
        libc::syscall(libc::SYS_kcmp, a, b, 1 /* KCMP_VM */, 0, 0)
    }
}

/// The keeper (the hook's parent) runs in ctxhost's own address space, is
/// ctxhost's child, and when the calls are done ctxhost's argv and
/// environment (which a forked keeper wipes in its copy) are intact, and
/// ctxhost is still dumpable (a forked keeper turns that off for itself).
#[test]
fn the_keeper_shares_ctxhosts_memory_and_changes_none_of_it() {
    let cmdline = std::fs::read("/proc/self/cmdline").unwrap();
    let environ = std::fs::read("/proc/self/environ").unwrap();
    let (p, runner) = trusted(&format!(
        "echo $PPID > \"$PWD/keeper\"\nfor i in $(seq 500); do [ -e \"$PWD/seen\" ] && break; sleep 0.02; done\n{EMPTY}\n"
    ));
    let rt = runtime();
    let call = rt.spawn(async move { runner.call(&ingest("a"), &CallOptions::default()).await });
    let keeper = pid_in(&p.dir.join("keeper"));
    let me = std::process::id() as i32;
    let shared = same_memory(me, keeper);
    let parent = crate::util::procs::parent_of(keeper);
    write(&p.dir.join("seen"), "");
    rt.block_on(call).unwrap().unwrap();
    assert_eq!(shared, 0, "the keeper {keeper} shares ctxhost's address space (kcmp KCMP_VM)");
    assert_eq!(parent, Some(me), "the keeper is ctxhost's own child");
    within(10, "the keeper to be reaped", || gone(keeper));
    assert_eq!(std::fs::read("/proc/self/cmdline").unwrap(), cmdline, "ctxhost's argv is untouched");
    assert_eq!(std::fs::read("/proc/self/environ").unwrap(), environ, "ctxhost's environment is untouched");
    // SAFETY: prctl(PR_GET_DUMPABLE) reads a flag of this process.
    assert_eq!(unsafe { libc::prctl(libc::PR_GET_DUMPABLE) }, 1, "ctxhost is still dumpable");
}

/// The keeper is no wider door into ctxhost's memory than ctxhost itself:
/// a trusted hook that opens its keeper's `/proc/<pid>/mem` for writing
/// gets exactly what it gets opening ctxhost's own (it runs as ctxhost's
/// user either way; nothing is written).
#[test]
fn the_keepers_memory_is_no_wider_door_than_ctxhosts_own() {
    let (_p, runner) = trusted(
        "host=$(cut -d' ' -f4 /proc/$PPID/stat)
         if (exec 3<>/proc/$PPID/mem) 2>/dev/null; then k=open; else k=denied; fi
         if (exec 3<>/proc/$host/mem) 2>/dev/null; then h=open; else h=denied; fi
         printf '{\"memories\":[{\"content\":\"%s\"},{\"content\":\"%s\"},{\"content\":\"%s\"}]}\n' \"$k\" \"$h\" \"$host\"
",
    );
    let rt = runtime();
    let reply = rt.block_on(runner.call(&ingest("a"), &CallOptions::default())).unwrap();
    let c = contents(&reply);
    assert_eq!(c[2], std::process::id().to_string(), "the keeper's parent is ctxhost: {c:?}");
    assert_eq!(c[0], c[1], "the keeper's memory opens as ctxhost's does: {c:?}");
}

/// A trusted hook starts a daemon that leaves its process group and
/// session (`setsid`, double fork) and a plain background child, then
/// returns: both are dead soon after the call.
#[test]
fn a_daemon_a_trusted_hook_leaves_dies_with_the_call() {
    let m = Marker::new();
    let (_p, runner) = trusted(&format!(
        "setsid bash -c \"{} & exec {}\" </dev/null >/dev/null 2>&1 &\n{} </dev/null >/dev/null 2>&1 &\n\
         for i in $(seq 100); do [ \"$(pgrep -c -f '{}')\" -ge 3 ] && break; sleep 0.02; done\n{EMPTY}\n",
        m.sleep(120),
        m.sleep(121),
        m.sleep(122),
        m.arg(0).trim_start_matches('0'),
    ));
    let rt = runtime();
    rt.block_on(runner.call(&ingest("a"), &CallOptions::default())).unwrap();
    let ran = m.pids().len();
    let dead = m.gone_soon();
    m.kill_all();
    assert!(dead, "the hook's daemon and child outlived the call ({ran} were running when it returned)");
}

/// A trusted hook SIGKILLs its keeper and goes on sleeping: it dies with
/// the keeper (the call ends at once, reported as a SIGKILL), and the same
/// loaded plugin's next call runs normally.
#[test]
fn a_hook_that_kills_its_keeper_dies_with_it_and_ctxhost_carries_on() {
    let m = Marker::new();
    let (p, runner) = trusted(&format!(
        "if [ -e \"$PWD/calm\" ]; then echo '{{\"memories\":[{{\"content\":\"calm\"}}]}}'; exit 0; fi\n\
         kill -9 $PPID\n{}\n{EMPTY}\n",
        m.sleep(60)
    ));
    let rt = runtime();
    let start = Instant::now();
    let killed = rt.block_on(runner.call(&ingest("a"), &CallOptions::default()));
    let took = start.elapsed();
    let dead = m.gone_soon();
    m.kill_all();
    match killed {
        Err(HookError::Exit { label, .. }) => assert!(label.contains("SIGKILL"), "{label}"),
        other => panic!("a call whose keeper was killed ends as killed: {other:?}"),
    }
    assert!(took < Duration::from_secs(10), "the call ended with its keeper, not with the hook's sleep: {took:?}");
    assert!(dead, "the hook outlived its keeper");
    write(&p.dir.join("calm"), "");
    let reply = rt.block_on(runner.call(&ingest("a"), &CallOptions::default())).unwrap();
    assert_eq!(contents(&reply), ["calm"]);
}

/// A call dropped while its hook sleeps, and a call past its deadline:
/// the hook is dead soon after, and the keeper is reaped (no zombie left).
#[test]
fn a_dropped_or_timed_out_call_leaves_no_process_and_no_zombie() {
    let m = Marker::new();
    let (p, runner) = trusted(&format!("echo $PPID > \"$PWD/keeper-$$\"\n{}\n{EMPTY}\n", m.sleep(60)));
    let runner = std::sync::Arc::new(runner);
    let rt = runtime();
    let r = runner.clone();
    let call = rt.spawn(async move { r.call(&ingest("a"), &CallOptions::default()).await });
    assert!(m.running(1, Duration::from_secs(10)), "the hook's sleep never ran");
    call.abort();
    let _ = rt.block_on(call);
    let dropped_dead = m.gone_soon();

    let timed_out = rt.block_on(runner.call(&ingest("a"), &CallOptions { timeout_secs: Some(1) }));
    let timed_out_dead = m.gone_soon();
    m.kill_all();
    assert!(dropped_dead, "the dropped call's hook outlived it");
    assert!(matches!(timed_out, Err(HookError::Timeout { .. })), "{timed_out:?}");
    assert!(timed_out_dead, "the timed-out call's hook outlived it");
    let keepers: Vec<i32> = std::fs::read_dir(&p.dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("keeper-"))
        .map(|e| pid_in(&e.path()))
        .collect();
    assert_eq!(keepers.len(), 2, "both calls started: {keepers:?}");
    for keeper in keepers {
        within(10, &format!("the keeper {keeper} to be reaped"), || gone(keeper));
    }
}

/// Exit codes and signals come through as for a spawned hook.
#[test]
fn exit_codes_and_signals_come_through() {
    let (_p, runner) = trusted(
        "read -r line\ncase \"$line\" in\n*'\"code\"'*) exit 3;;\n*'\"term\"'*) kill -TERM $$;;\nesac\necho '{\"memories\":[]}'\n",
    );
    let rt = runtime();
    match rt.block_on(runner.call(&ingest("code"), &CallOptions::default())) {
        Err(HookError::Exit { code, label, .. }) => assert_eq!((code, label.as_str()), (Some(3), "exit code 3")),
        other => panic!("exit 3: {other:?}"),
    }
    match rt.block_on(runner.call(&ingest("term"), &CallOptions::default())) {
        Err(HookError::Exit { code, label, .. }) => {
            assert_eq!((code, label.as_str()), (None, "killed by signal 15"))
        }
        other => panic!("SIGTERM: {other:?}"),
    }
    rt.block_on(runner.call(&ingest("fine"), &CallOptions::default())).unwrap();
}

/// Many calls at once on a multi-thread runtime: each gets its own reply
/// (its agent id, its keeper), and every keeper is reaped.
#[test]
fn concurrent_calls_each_get_their_own_reply() {
    let (_p, runner) = trusted(
        "read -r line\nagent=$(printf '%s' \"$line\" | sed -n 's/.*\"agent_id\":\"\\([^\"]*\\)\".*/\\1/p')\n\
         printf '{\"memories\":[{\"content\":\"%s\"},{\"content\":\"%s\"}]}\\n' \"$agent\" \"$PPID\"\n",
    );
    let runner = std::sync::Arc::new(runner);
    let rt = runtime();
    let calls: Vec<_> = (0..24)
        .map(|i| {
            let r = runner.clone();
            rt.spawn(async move { r.call(&ingest(&format!("agent{i}")), &CallOptions::default()).await })
        })
        .collect();
    let mut keepers = std::collections::BTreeSet::new();
    for (i, call) in calls.into_iter().enumerate() {
        let reply = rt.block_on(call).unwrap().unwrap();
        let c = contents(&reply);
        assert_eq!(c[0], format!("agent{i}"), "{reply}");
        keepers.insert(c[1].parse::<i32>().unwrap());
    }
    assert_eq!(keepers.len(), 24, "one keeper per call");
    for keeper in keepers {
        within(10, &format!("the keeper {keeper} to be reaped"), || gone(keeper));
    }
}

/// This whole module again, as uid 65534 (when the tests run as root).
#[test]
fn the_trusted_suite_passes_as_an_unprivileged_user() {
    crate::util::nobody::rerun_as_nobody("trusted::", &["trusted::the_trusted_suite"], &[], 7);
}
