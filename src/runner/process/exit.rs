//! Human labels for how a hook process ended (LibreFang's wording).

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

/// `exit code N`, `OOM-killed or SIGKILL (signal 9)`, `SIGSEGV — segfault
/// (signal 11)`, `SIGSYS — disallowed syscall, seccomp triggered (signal 31)`,
/// `killed by signal N`; shells report signal deaths as 128+N, labelled alike.
pub fn label(status: ExitStatus) -> String {
    if let Some(signal) = status.signal() {
        return match signal {
            9 => format!("OOM-killed or SIGKILL (signal {signal})"),
            11 => format!("SIGSEGV — segfault (signal {signal})"),
            31 => format!("SIGSYS — disallowed syscall, seccomp triggered (signal {signal})"),
            _ => format!("killed by signal {signal}"),
        };
    }
    match status.code() {
        Some(137) => "OOM-killed or SIGKILL (exit 137)".to_owned(),
        Some(139) => "SIGSEGV — segfault (exit 139)".to_owned(),
        Some(159) => "SIGSYS — disallowed syscall, seccomp triggered (exit 159)".to_owned(),
        Some(code) => format!("exit code {code}"),
        None => "unknown exit status".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        let exit = |code: i32| ExitStatus::from_raw(code << 8);
        let signal = ExitStatus::from_raw;
        assert_eq!(label(exit(3)), "exit code 3");
        assert_eq!(label(exit(137)), "OOM-killed or SIGKILL (exit 137)");
        assert_eq!(label(signal(9)), "OOM-killed or SIGKILL (signal 9)");
        assert_eq!(label(signal(11)), "SIGSEGV — segfault (signal 11)");
        assert_eq!(label(signal(31)), "SIGSYS — disallowed syscall, seccomp triggered (signal 31)");
        assert_eq!(label(signal(15)), "killed by signal 15");
    }
}
