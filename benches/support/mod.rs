//! Measurement helpers shared by the benches: paired, alternating samples.
//!
//! Two criterion groups run seconds apart, and this 2-core machine drifts
//! more than some of the differences we care about; alternating the two
//! sides call by call and taking medians of the differences cancels that.

#![allow(dead_code)]

use std::time::Instant;

/// Alternates `a` and `b` `pairs` times (after a warm-up) and returns the
/// medians of a, of b, of b - a and of b / a, in ms.
pub fn paired(pairs: usize, a: impl FnMut(), b: impl FnMut()) -> (f64, f64, f64, f64) {
    let s = paired_samples(pairs, a, b);
    (median(s.0), median(s.1), median(s.2), median(s.3))
}

/// The raw samples of [`paired`]: times of a, of b, differences, ratios.
pub fn paired_samples(pairs: usize, a: impl FnMut(), b: impl FnMut()) -> (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>) {
    paired_samples_after(pairs, std::time::Duration::ZERO, a, b)
}

/// [`paired_samples`] with a pause (not timed) before each timed call: a
/// call that finds the other side idle.
pub fn paired_samples_after(
    pairs: usize,
    pause: std::time::Duration,
    mut a: impl FnMut(),
    mut b: impl FnMut(),
) -> (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>) {
    let time = |f: &mut dyn FnMut()| {
        if !pause.is_zero() {
            std::thread::sleep(pause);
        }
        let t = Instant::now();
        f();
        t.elapsed().as_secs_f64() * 1e3
    };
    for _ in 0..3 {
        a();
        b();
    }
    let (mut ta, mut tb, mut diff, mut ratio) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..pairs {
        // Alternate which side goes first, so neither always runs on a warmer cache.
        let (x, y) = if i % 2 == 0 {
            let x = time(&mut a);
            (x, time(&mut b))
        } else {
            let y = time(&mut b);
            (time(&mut a), y)
        };
        ta.push(x);
        tb.push(y);
        diff.push(y - x);
        ratio.push(y / x);
    }
    (ta, tb, diff, ratio)
}

/// The `q` quantile (0..1) of `v`.
pub fn quantile(mut v: Vec<f64>, q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q) as usize]
}

pub fn median(v: Vec<f64>) -> f64 {
    quantile(v, 0.5)
}

/// One POST of a JSON body on a fresh connection (`Connection: close`) to a
/// daemon the bench started; returns the status and the body.
pub async fn http_post(addr: std::net::SocketAddr, path: &str, body: &str) -> (u16, String) {
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    http_exchange(addr, &request).await
}

/// One GET, as [`http_post`].
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    http_exchange(addr, &format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")).await
}

async fn http_exchange(addr: std::net::SocketAddr, request: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}

/// As root: runs this bench again as uid 65534 (`setpriv`) with
/// `CTXHOST_BENCH_SUMMARY_ONLY=1`, so it prints its paired summary only.
pub fn rerun_summary_as_nobody() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    let me = std::env::current_exe().unwrap();
    let status = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(&me)
        .env("CTXHOST_BENCH_SUMMARY_ONLY", "1")
        .env("CTXHOST_GUESTS_PREBUILT", "1")
        .env("HOME", std::env::temp_dir())
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .status();
    match status {
        Ok(s) if s.success() => {}
        other => println!("  (the run as uid 65534 did not complete: {other:?}; is the target dir readable by it?)"),
    }
}

/// Writes `home`'s `config.toml` (`extra`, then a `plugin_stack` of `names`)
/// and loads that stack; every plugin must have loaded.
pub fn load_stack_engine(
    home: &ctxhost::home::Home,
    extra: &str,
    names: &[impl AsRef<str>],
) -> ctxhost::engine::stack::StackEngine {
    use ctxhost::config::HostConfig;
    use ctxhost::plugin::LoadContext;
    let stack: Vec<String> = names.iter().map(|l| format!("\"{}\"", l.as_ref())).collect();
    let config_text = format!("{extra}[context_engine]\nplugin_stack = [{}]\n", stack.join(", "));
    std::fs::create_dir_all(home.root()).unwrap();
    std::fs::write(home.config_file(), config_text).unwrap();
    let (config, _) = HostConfig::load(home.config_file()).unwrap();
    let cx = LoadContext { home, config: &config, host_env: &LoadContext::process_env };
    let (engine, warnings) = ctxhost::app::load_stack(&cx).unwrap();
    assert!(warnings.iter().all(|w| !w.contains("left out")), "{warnings:?}");
    engine
}

/// The load average now (`/proc/loadavg`'s first three fields; `?` when
/// unreadable): printed with the figures, as other builds share the cores.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}
