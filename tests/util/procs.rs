//! Finding a hook's processes from the host. A confined hook runs as pid 1
//! of its own pid namespace, so the pids it can report (`$$`, `$!`,
//! `os.getpid()`) mean nothing to the host. A test marks the processes it
//! wants to find instead — a sleep whose argument ends in a number unique to
//! the test and the run ([`Marker`]), or a token the process carries in its
//! argv — and looks them up in the host's `/proc`.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Digits no other test of this run, nor another run of the suite at the
/// same time (its pid differs), uses.
pub struct Marker(String);

impl Marker {
    pub fn new() -> Marker {
        Marker(format!("{:07}{:05}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)))
    }

    /// `sleep <secs>.<digits>`: a shell command sleeping about `secs`
    /// seconds that the host can find.
    pub fn sleep(&self, secs: u32) -> String {
        format!("sleep {}", self.arg(secs))
    }

    /// The argument of [`Marker::sleep`].
    pub fn arg(&self, secs: u32) -> String {
        format!("{secs}.{}", self.0)
    }

    /// Host pids of the live processes carrying the marker.
    pub fn pids(&self) -> Vec<i32> {
        pids_with_arg(&format!(".{}", self.0))
    }

    /// Waits (bounded) until at least `n` marked processes run; false when
    /// they never did.
    pub fn running(&self, n: usize, limit: Duration) -> bool {
        let start = Instant::now();
        while self.pids().len() < n {
            if start.elapsed() > limit {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    }

    /// True when no marked process is left within 2 s (SIGKILL is delivered
    /// at once, but the kernel may take a moment to tear a process down).
    pub fn gone_soon(&self) -> bool {
        gone_soon(&format!(".{}", self.0))
    }

    /// Kills whatever carries the marker (a test cleaning up after itself).
    pub fn kill_all(&self) {
        for pid in self.pids() {
            // SAFETY: kill(2) on processes the test's own hook started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

impl Default for Marker {
    fn default() -> Self {
        Marker::new()
    }
}

/// Host pids of the live processes (zombies have no argv) with an argument
/// containing `needle`.
pub fn pids_with_arg(needle: &str) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut found = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        if cmdline.split(|&b| b == 0).any(|arg| String::from_utf8_lossy(arg).contains(needle)) {
            found.push(pid);
        }
    }
    found
}

/// True when no process with an argument containing `needle` is left
/// within 2 s.
pub fn gone_soon(needle: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(2);
    while !pids_with_arg(needle).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    pids_with_arg(needle).is_empty()
}

/// The parent of `pid` as the host sees it.
pub fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')').next()?.split_whitespace().nth(1)?.parse().ok()
}

/// The one live host process carrying `token` in its argv (a worker that
/// re-executed itself with its token as an argument).
pub fn pid_with_token(token: &str) -> i32 {
    let pids = pids_with_arg(token);
    assert_eq!(pids.len(), 1, "one process carries the token {token}: {pids:?}");
    pids[0]
}
