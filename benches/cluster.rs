//! The agent API of real `ctxhost serve` processes under 32 concurrent
//! clients, each looping ingest then after_turn on its own agent, against
//! (a) one instance on SQLite (the default home), (b) one instance on
//! PostgreSQL (`[store] url`), (c) three instances on one PostgreSQL behind
//! a round-robin client (each client sends its next call to the next
//! instance).
//!
//! Run: `cargo bench --bench cluster`. `CLUSTER_BENCH_SECS` (default 10)
//! is how long each case is measured, after a warm-up of a fifth of that.
//! The PostgreSQL is a throw-away cluster of this process
//! (`tests/util/pg.rs`: a unix socket in a temp dir, fsync off, stopped at
//! exit), a fresh database per case. Each client keeps one HTTP/1.1
//! connection per instance. Prints calls/s, p50, p99 (all calls, and
//! ingest and after_turn apart), errors (any status but 200, any failed
//! exchange: goal 0), and the ratios (b)/(a) and (c)/(b); fails if a case
//! had an error.
//!
//! On a 2-core machine the clients, the instances and the database share
//! the same cores: (c) cannot show scaling, only what a second and third
//! process cost.

// A benchmark: a panic is a failed run, not a crash of ctxhost.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/util/http.rs"]
#[allow(dead_code)]
mod http;
#[path = "../tests/util/pg.rs"]
mod pg;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Concurrent clients.
const CLIENTS: usize = 32;

const TOPICS: &[&str] =
    &["garden", "coffee", "jazz", "lisbon", "paris", "llama", "invoice", "bakery", "nurse", "vinyl"];

/// One HTTP/1.1 keep-alive connection to one instance.
struct Conn {
    addr: String,
    stream: BufReader<TcpStream>,
}

impl Conn {
    async fn open(addr: &str) -> std::io::Result<Conn> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Conn { addr: addr.to_owned(), stream: BufReader::new(stream) })
    }

    /// POSTs `body` to `path`; the status, or an error when the exchange
    /// failed (the connection is then reopened for the next call).
    async fn post(&mut self, path: &str, body: &str) -> std::io::Result<u16> {
        let result = self.exchange(path, body).await;
        if result.is_err() {
            *self = Conn::open(&self.addr.clone()).await?;
        }
        result
    }

    async fn exchange(&mut self, path: &str, body: &str) -> std::io::Result<u16> {
        let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned());
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.addr,
            body.len()
        );
        self.stream.get_mut().write_all(request.as_bytes()).await?;
        let mut line = String::new();
        self.stream.read_line(&mut line).await?;
        let status: u16 = line.split(' ').nth(1).and_then(|s| s.parse().ok()).ok_or_else(|| bad(&line))?;
        let mut length = None;
        loop {
            line.clear();
            if self.stream.read_line(&mut line).await? == 0 {
                return Err(bad("the connection closed in the headers"));
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse::<usize>().ok();
            }
        }
        let mut body = vec![0; length.ok_or_else(|| bad("no content-length"))?];
        self.stream.read_exact(&mut body).await?;
        Ok(status)
    }
}

/// What one case measured.
struct Outcome {
    calls: usize,
    secs: f64,
    all: Vec<Duration>,
    ingest: Vec<Duration>,
    after_turn: Vec<Duration>,
    errors: usize,
    first_error: Option<String>,
}

fn quantile(v: &mut [Duration], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort();
    v[((v.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e3
}

/// One client: ingest then after_turn on agent `c<id>`, the next call to
/// the next instance, until `stop`; latencies recorded from `measure_from`.
async fn client(
    id: usize,
    addrs: Arc<Vec<String>>,
    measure_from: Instant,
    stop: Instant,
) -> (Vec<Duration>, Vec<Duration>, usize, Option<String>) {
    let mut conns = Vec::new();
    for a in addrs.iter() {
        conns.push(Conn::open(a).await.unwrap());
    }
    let (mut ingest, mut after_turn, mut errors, mut first_error) = (Vec::new(), Vec::new(), 0, None);
    let mut n = id;
    while Instant::now() < stop {
        let topic = TOPICS[n % TOPICS.len()];
        let other = TOPICS[(n / TOPICS.len() + id) % TOPICS.len()];
        let calls = [
            (format!("/api/agents/c{id}/ingest"), format!(r#"{{"message":"what about my {topic} and {other}?"}}"#)),
            (
                format!("/api/agents/c{id}/after_turn"),
                format!(
                    r#"{{"messages":[{{"role":"user","content":"note {n}: my {topic} is fine, the {other} too"}},{{"role":"assistant","content":"noted"}}]}}"#
                ),
            ),
        ];
        for (k, (path, body)) in calls.iter().enumerate() {
            let which = n % conns.len();
            let conn = &mut conns[which];
            n += 1;
            let started = Instant::now();
            let result = conn.post(path, body).await;
            let took = started.elapsed();
            if started < measure_from {
                continue;
            }
            match result {
                Ok(200) => {}
                Ok(status) => {
                    errors += 1;
                    first_error.get_or_insert_with(|| format!("{path}: status {status}"));
                }
                Err(e) => {
                    errors += 1;
                    first_error.get_or_insert_with(|| format!("{path}: {e}"));
                }
            }
            if k == 0 { ingest.push(took) } else { after_turn.push(took) }
        }
    }
    (ingest, after_turn, errors, first_error)
}

/// Runs the clients against `addrs` for `secs` (after a warm-up).
fn run(rt: &tokio::runtime::Runtime, addrs: Vec<String>, secs: f64) -> Outcome {
    let addrs = Arc::new(addrs);
    let measure_from = Instant::now() + Duration::from_secs_f64(secs / 5.0);
    let stop = measure_from + Duration::from_secs_f64(secs);
    let results = rt.block_on(async {
        let tasks: Vec<_> =
            (0..CLIENTS).map(|id| tokio::spawn(client(id, addrs.clone(), measure_from, stop))).collect();
        let mut results = Vec::new();
        for t in tasks {
            results.push(t.await.unwrap());
        }
        results
    });
    let secs = Instant::now().saturating_duration_since(measure_from).as_secs_f64();
    let mut out = Outcome {
        calls: 0,
        secs,
        all: Vec::new(),
        ingest: Vec::new(),
        after_turn: Vec::new(),
        errors: 0,
        first_error: None,
    };
    for (ingest, after_turn, errors, first_error) in results {
        out.all.extend(&ingest);
        out.all.extend(&after_turn);
        out.ingest.extend(ingest);
        out.after_turn.extend(after_turn);
        out.errors += errors;
        out.first_error = out.first_error.or(first_error);
    }
    out.calls = out.all.len();
    out
}

/// A home whose config names `url` as its store (none: SQLite).
fn home(root: &Path, name: &str, url: Option<&str>) -> std::path::PathBuf {
    let home = root.join(name);
    std::fs::create_dir_all(home.join("plugins")).unwrap();
    let config = url.map(|u| format!("[store]\nurl = \"{u}\"\n")).unwrap_or_default();
    std::fs::write(home.join("config.toml"), config).unwrap();
    home
}

fn main() {
    // `cargo bench` passes `--bench`; no other argument is read.
    let secs: f64 = std::env::var("CLUSTER_BENCH_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(10.0);
    let root = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let mut rows: Vec<(&str, Outcome)> = Vec::new();

    {
        let daemon = http::Daemon::start(&home(root.path(), "a", None), &[], &[]);
        rows.push(("(a) 1 instance, SQLite", run(&rt, vec![daemon.addr.clone()], secs)));
        let (ok, stderr) = daemon.stop();
        assert!(ok, "instance (a) did not stop cleanly:\n{stderr}");
    }
    {
        let db = pg::database();
        let daemon = http::Daemon::start(&home(root.path(), "b", Some(&db.url)), &[], &[]);
        rows.push(("(b) 1 instance, PostgreSQL", run(&rt, vec![daemon.addr.clone()], secs)));
        let (ok, stderr) = daemon.stop();
        assert!(ok, "instance (b) did not stop cleanly:\n{stderr}");
    }
    {
        let db = pg::database();
        let daemons: Vec<_> = (0..3)
            .map(|i| http::Daemon::start(&home(root.path(), &format!("c{i}"), Some(&db.url)), &[], &[]))
            .collect();
        let addrs = daemons.iter().map(|d| d.addr.clone()).collect();
        rows.push(("(c) 3 instances, one PostgreSQL", run(&rt, addrs, secs)));
        for d in daemons {
            let (ok, stderr) = d.stop();
            assert!(ok, "an instance of (c) did not stop cleanly:\n{stderr}");
        }
    }

    println!("\n{CLIENTS} clients, ingest + after_turn each, {secs} s per case (after a {} s warm-up)\n", secs / 5.0);
    println!(
        "| case | calls/s | p50 ms | p99 ms | ingest p50 | ingest p99 | after_turn p50 | after_turn p99 | errors |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut summary = Vec::new();
    for (name, o) in &mut rows {
        let rate = o.calls as f64 / o.secs;
        let p50 = quantile(&mut o.all, 0.5);
        println!(
            "| {name} | {rate:.0} | {p50:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} |",
            quantile(&mut o.all, 0.99),
            quantile(&mut o.ingest, 0.5),
            quantile(&mut o.ingest, 0.99),
            quantile(&mut o.after_turn, 0.5),
            quantile(&mut o.after_turn, 0.99),
            o.errors
        );
        summary.push((rate, p50, quantile(&mut o.ingest, 0.5)));
    }
    let ratio = |x: usize, y: usize| {
        format!(
            "calls/s {:.2}x, p50 {:.2}x, ingest p50 {:+.2} ms",
            summary[x].0 / summary[y].0,
            summary[x].1 / summary[y].1,
            summary[x].2 - summary[y].2
        )
    };
    println!("\n(b)/(a): {}", ratio(1, 0));
    println!("(c)/(b): {}", ratio(2, 1));
    let failed: Vec<String> = rows
        .iter()
        .filter(|(_, o)| o.errors > 0)
        .map(|(name, o)| format!("{name}: {} errors, first: {}", o.errors, o.first_error.as_deref().unwrap_or("")))
        .collect();
    assert!(failed.is_empty(), "calls failed:\n{}", failed.join("\n"));
}
