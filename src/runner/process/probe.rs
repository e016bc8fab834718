//! Short helper commands the host runs for itself — a version probe, a shim
//! asked for its interpreter — under the same rules as a hook: own process
//! group, bounded time, output read while it runs, the whole group killed at
//! the end. A helper that forks a background child holding its stdout can
//! therefore never hang loading or the doctor.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How much of each stream is kept.
const KEEP: u64 = 64 * 1024;

/// What a helper printed.
#[derive(Debug)]
pub struct ProbeOutput {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// Runs `cmd` (stdin closed) for at most `timeout`.
///
/// # Errors
/// The command could not start, or did not finish in time (it is killed,
/// with its group).
pub fn run(cmd: &mut Command, timeout: Duration) -> Result<ProbeOutput, String> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let mut child = cmd
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run `{program}`: {e}"))?;
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        let (tx, rx) = mpsc::channel();
        if let Some(pipe) = pipe {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let _ = pipe.take(KEEP).read_to_end(&mut buf);
                let _ = tx.send(buf);
            });
        }
        rx
    };
    let out = reader(child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let err = reader(child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let Some(status) = wait_then_kill_group(&mut child, timeout, Duration::from_millis(2))
        .map_err(|e| format!("cannot wait for `{program}`: {e}"))?
    else {
        return Err(format!("`{program}` did not finish within {timeout:?}"));
    };
    // Everything the group wrote is in the pipes; whatever escaped the group
    // and still holds them is not waited for long.
    let collect = |rx: mpsc::Receiver<Vec<u8>>| rx.recv_timeout(Duration::from_millis(200)).unwrap_or_default();
    Ok(ProbeOutput { status, stdout: collect(out), stderr: collect(err) })
}

/// Waits up to `timeout` (polling every `poll`) for `child`, the leader of
/// its own process group, then kills the whole group and reaps the leader.
/// Returns its status, or `None` when the deadline ended the wait. The leader
/// is seen exiting without being reaped, so the group id cannot have been
/// reused by the time the group is killed.
///
/// # Errors
/// Reaping failed.
pub fn wait_then_kill_group(
    child: &mut std::process::Child,
    timeout: Duration,
    poll: Duration,
) -> std::io::Result<Option<ExitStatus>> {
    let pgid = child.id() as libc::pid_t;
    let started = Instant::now();
    let exited = loop {
        if super::exit::exited_unreaped(pgid) {
            break true;
        }
        if started.elapsed() >= timeout {
            break false;
        }
        std::thread::sleep(poll);
    };
    if pgid > 0 {
        // SAFETY: kill(2) on our unreaped child's process group; pgid > 0.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    }
    let status = child.wait()?;
    Ok(exited.then_some(status))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_background_child_holding_stdout_does_not_hang_the_probe() {
        let started = Instant::now();
        let out = run(Command::new("sh").args(["-c", "echo v1.2; sleep 30 &"]), Duration::from_secs(5)).unwrap();
        assert!(started.elapsed() < Duration::from_secs(2), "took {:?}", started.elapsed());
        assert!(out.status.success());
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "v1.2");
    }

    #[test]
    fn a_slow_helper_is_killed_at_the_deadline() {
        let started = Instant::now();
        let err = run(Command::new("sh").args(["-c", "sleep 30"]), Duration::from_millis(200)).unwrap_err();
        assert!(err.contains("did not finish within"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}
