//! The daemon under hostile clients: idle and slow connections, huge and
//! many bodies, doctor floods, absurd scaffold names. Every loop is bounded
//! and talks only to 127.0.0.1; limits are set small in each test's
//! config.toml so the attacks are cheap.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::util::http::{Daemon, request};
use crate::util::site::Site;
use crate::util::write;

/// A daemon on a fresh home whose config.toml has `[server]` `limits`.
fn daemon(site: &Site, limits: &str, args: &[&str], envs: &[(&str, &str)]) -> Daemon {
    write(&site.home().join("config.toml"), &format!("[server]\n{limits}\n"));
    Daemon::start(site.home(), args, envs)
}

fn connect(d: &Daemon) -> TcpStream {
    let s = TcpStream::connect(&d.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    s
}

/// Reads until the server closes (or resets) the connection: what it sent
/// and when it closed. Bounded by the stream's read timeout.
fn until_closed(s: &mut TcpStream) -> (String, Instant) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                panic!("the server kept the connection open (read timeout); got {:?}", String::from_utf8_lossy(&got))
            }
            Err(_) => break,
        }
    }
    (String::from_utf8_lossy(&got).into_owned(), Instant::now())
}

/// Whether the server answers on `s` within `wait` (without closing it).
fn answers_within(s: &mut TcpStream, wait: Duration) -> Option<String> {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut buf = [0u8; 4096];
    let got = match s.read(&mut buf) {
        Ok(n) => Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
        Err(_) => None,
    };
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    got
}

/// The attacker: opens idle connections up to the cap (8), then one more,
/// the way ~20k idle connections exhausted the daemon's descriptors. Must
/// hold: while the idle ones are open a normal request still succeeds (the
/// slot it needs is free), the one past the cap is answered 503 within a
/// second, the server itself closes every idle connection after the header
/// timeout (2 s; before, they stayed ≥ 150 s), and then requests succeed again.
#[test]
fn idle_connections_are_capped_and_closed_after_the_header_timeout() {
    let site = Site::new();
    let d = daemon(&site, "max_connections = 8\nheader_timeout_secs = 2", &[], &[]);
    let opened = Instant::now();
    let mut idle: Vec<TcpStream> = (0..7).map(|_| connect(&d)).collect();
    let r = d.get("/healthz");
    assert_eq!(r.status, 200, "a normal request beside 7 idle connections: {}", r.body);
    // The 8th idle connection takes the slot the request left (retry while
    // the server has not released it yet: then this one is refused).
    let mut eighth = None;
    for _ in 0..20 {
        let mut s = connect(&d);
        match answers_within(&mut s, Duration::from_millis(200)) {
            None => {
                eighth = Some(s);
                break;
            }
            Some(reply) => assert!(reply.starts_with("HTTP/1.1 503"), "{reply}"),
        }
    }
    idle.push(eighth.expect("an 8th connection is accepted once the request's slot is free"));
    let mut extra = connect(&d);
    let asked = Instant::now();
    extra.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let (reply, closed) = until_closed(&mut extra);
    assert!(reply.starts_with("HTTP/1.1 503"), "the connection past the cap: {reply:?}");
    assert!(reply.contains("max_connections"), "{reply}");
    assert!(closed - asked < Duration::from_secs(1), "refused in {:?}", closed - asked);

    for (i, s) in idle.iter_mut().enumerate() {
        let (_, closed) = until_closed(s);
        let after = closed - opened;
        assert!(after < Duration::from_secs(2 + 3), "idle connection {i} closed by the server after {after:?}");
    }
    assert!(opened.elapsed() >= Duration::from_millis(1900), "closed before the header timeout");
    let r = d.get("/healthz");
    assert_eq!(r.status, 200, "after the idle connections are gone: {}", r.body);
}

/// The attacker: a slowloris — a request head sent a few bytes at a time and
/// never finished — and a request whose body never arrives in full. Must
/// hold: the server closes the first after the header timeout (2 s) however
/// it trickles, and answers the second 503 after the request timeout (3 s),
/// closing both; the daemon still answers others meanwhile.
#[test]
fn slow_headers_and_slow_bodies_are_cut_off() {
    let site = Site::new();
    let d = daemon(&site, "header_timeout_secs = 2\nrequest_timeout_secs = 3", &[], &[]);
    let mut slow_head = connect(&d);
    let started = Instant::now();
    let trickle = {
        let mut s = slow_head.try_clone().unwrap();
        std::thread::spawn(move || {
            let lines = std::iter::once("GET /healthz HTTP/1.1\r\nHost: x\r\n".to_owned())
                .chain((0..20).map(|i| format!("X-Slow-{i}: {i}\r\n")));
            for line in lines {
                if s.write_all(line.as_bytes()).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(300));
            }
        })
    };
    let mut slow_body = connect(&d);
    slow_body
        .write_all(b"POST /api/agents/a1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"text\":")
        .unwrap();
    assert_eq!(d.get("/healthz").status, 200, "others are served meanwhile");

    let (reply, closed) = until_closed(&mut slow_head);
    let after = closed - started;
    assert!(!reply.contains("200 OK"), "{reply}");
    assert!(
        after >= Duration::from_millis(1900) && after < Duration::from_secs(2 + 3),
        "slow head closed after {after:?}"
    );
    let (reply, closed) = until_closed(&mut slow_body);
    let after = closed - started;
    assert!(reply.starts_with("HTTP/1.1 503"), "{reply:?}");
    assert!(reply.contains("request_timeout_secs"), "{reply}");
    assert!(
        after >= Duration::from_millis(2900) && after < Duration::from_secs(3 + 3),
        "slow body answered after {after:?}"
    );
    trickle.join().unwrap();
}

/// `VmHWM` (peak resident memory) of a process, in bytes.
fn peak_rss(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

/// A JSON body of exactly `len` bytes: `{"text":"hi"}` padded with spaces.
fn padded_body(len: usize) -> Vec<u8> {
    let mut body = b"{\"text\":\"hi\"}".to_vec();
    body.resize(len, b' ');
    body
}

fn post_head(len: usize) -> String {
    format!(
        "POST /api/agents/a1/messages HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {len}\r\n\r\n"
    )
}

/// The status line's code in `raw`, if any.
fn status_of(raw: &[u8]) -> Option<u16> {
    String::from_utf8_lossy(raw).split(' ').nth(1).and_then(|c| c.parse().ok())
}

/// One attacker connection: writes `head` and `body` (all but its last byte),
/// waits at `barrier` twice (the test measures in between), sends the last
/// byte and reads the answer: its status, or `None` when the server closed or
/// reset first. Every step is bounded by socket timeouts.
fn hold_then_finish(addr: &str, body: &[u8], barrier: &std::sync::Barrier) -> Option<u16> {
    let s = TcpStream::connect(addr).ok();
    let mut sent = false;
    if let Some(mut s) = s.as_ref() {
        let _ = s.set_write_timeout(Some(Duration::from_secs(10)));
        let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
        sent =
            s.write_all(post_head(body.len()).as_bytes()).and_then(|()| s.write_all(&body[..body.len() - 1])).is_ok();
    }
    barrier.wait();
    barrier.wait();
    let mut s = s?;
    if sent {
        let _ = s.write_all(&body[body.len() - 1..]);
    }
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    status_of(&raw)
}

/// The attacker: the body flood that took the daemon to 5.25 GB — 16
/// connections each sending a 60 MiB body at once — then 16 connections each
/// holding a 5 MiB body (within the 6 MiB per-request cap) sent but for its
/// last byte, and a request declaring 5 MiB while the budget is held. Limits:
/// 6 MiB a request, 8 MiB for all bodies in flight. Must hold: the 60 MiB
/// bodies are 413s refused before they are read; of the 5 MiB bodies at most
/// one is held at a time, the others are 503s (or cut off); the daemon's peak
/// RSS (`VmHWM`) stays under 150 MiB throughout (unbounded, the 60 MiB
/// bodies alone buffer 960 MiB); a declared body beyond what is left is a
/// 503 at once; afterwards the budget is whole again (a 5 MiB body succeeds).
#[test]
fn concurrent_large_bodies_are_refused_within_a_memory_budget() {
    const MIB: usize = 1024 * 1024;
    let bound = 150 * MIB as u64;
    let site = Site::new();
    let d = daemon(&site, "max_body_bytes = 6291456\nmax_body_bytes_in_flight = 8388608", &[], &[]);
    let before = peak_rss(d.pid());
    let addr = d.addr.clone();

    let huge = padded_body(60 * MIB);
    let barrier = std::sync::Barrier::new(17);
    let statuses: Vec<Option<u16>> = std::thread::scope(|scope| {
        let sends: Vec<_> = (0..16).map(|_| scope.spawn(|| hold_then_finish(&addr, &huge, &barrier))).collect();
        barrier.wait();
        barrier.wait();
        sends.into_iter().map(|h| h.join().unwrap()).collect()
    });
    drop(huge);
    let peak = peak_rss(d.pid());
    eprintln!("60 MiB bodies: peak RSS {} MiB (before {} MiB); {statuses:?}", peak >> 20, before >> 20);
    assert!(peak < bound, "peak RSS {} MiB after 16 × 60 MiB bodies; {statuses:?}", peak >> 20);
    assert!(statuses.iter().all(|s| matches!(s, None | Some(413))), "{statuses:?}");
    assert!(statuses.contains(&Some(413)), "{statuses:?}");

    let body = padded_body(5 * MIB);
    let barrier = std::sync::Barrier::new(17);
    let (held_peak, statuses): (u64, Vec<Option<u16>>) = std::thread::scope(|scope| {
        let sends: Vec<_> = (0..16).map(|_| scope.spawn(|| hold_then_finish(&addr, &body, &barrier))).collect();
        barrier.wait();
        // Every connection has sent what it will before its last byte.
        let mut refused = None;
        for _ in 0..40 {
            let mut s = connect(&d);
            s.write_all(post_head(5 * MIB).as_bytes()).unwrap();
            // "At once": well before the request timeout (the default 30 s)
            // would end a connection that never sends its body; 1 s leaves
            // room for a loaded machine (the catalogue also runs as 65534).
            if let Some(reply) = answers_within(&mut s, Duration::from_secs(1)) {
                refused = Some(reply);
                break;
            }
        }
        let held_peak = peak_rss(d.pid());
        barrier.wait();
        let refused = refused.expect("a body beyond the budget is answered at once");
        assert!(refused.starts_with("HTTP/1.1 503") && refused.contains("max_body_bytes_in_flight"), "{refused}");
        (held_peak, sends.into_iter().map(|h| h.join().unwrap()).collect())
    });
    eprintln!("5 MiB bodies held: peak RSS {} MiB; {statuses:?}", held_peak >> 20);
    let accepted = statuses.iter().filter(|s| **s == Some(200)).count();
    assert!(held_peak < bound, "peak RSS {} MiB with 16 × 5 MiB bodies held; {statuses:?}", held_peak >> 20);
    assert!(statuses.iter().all(|s| matches!(s, None | Some(200 | 503))), "{statuses:?}");
    // At most one: the budget holds one 5 MiB body, and on a loaded machine
    // the probe above may be the one that got it before any sender did.
    assert!(accepted <= 1, "one 5 MiB body fits the 8 MiB budget at a time: {statuses:?}");

    let mut s = connect(&d);
    s.write_all(post_head(5 * MIB).as_bytes()).unwrap();
    s.write_all(&body).unwrap();
    let (reply, _) = until_closed(&mut s);
    assert!(reply.starts_with("HTTP/1.1 200"), "the budget is whole again after the attack: {reply}");
}

/// The attacker: floods `GET /api/plugins/doctor` (each report used to start
/// a `--version` process per runtime: ×50 started ~300 processes), first
/// without the token. A fake `php` first on the daemon's PATH logs every
/// start. Must hold: without the token the route is a 401 and starts nothing;
/// 20 concurrent authorised reports start `php` once (the probes are cached
/// for 10 s), and every report still names its version.
#[test]
fn doctor_needs_the_token_and_floods_start_the_probes_once() {
    let site = Site::new();
    let bin = site.home().join("fakebin");
    let log = site.home().join("php-starts.log");
    write(&bin.join("php"), &format!("#!/bin/sh\necho started >> '{}'\necho 'PHP 8.3.99 (cli) fake'\n", log.display()));
    std::fs::set_permissions(bin.join("php"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let d = daemon(&site, "", &["--token", "s3cret-doctor"], &[("PATH", &path)]);
    let starts = |log: &Path| std::fs::read_to_string(log).map(|t| t.lines().count()).unwrap_or(0);

    let r = d.get("/api/plugins/doctor");
    assert_eq!(r.status, 401, "{}", r.body);
    let r = request(&d.addr, "GET", "/api/plugins/doctor", None, &[("Authorization", "Bearer wrong")]);
    assert_eq!(r.status, 401, "{}", r.body);
    assert_eq!(starts(&log), 0, "an unauthorised doctor started a probe");

    let started = Instant::now();
    let addr = d.addr.clone();
    let reports: Vec<_> = std::thread::scope(|scope| {
        let calls: Vec<_> = (0..20)
            .map(|_| {
                scope.spawn(|| {
                    request(&addr, "GET", "/api/plugins/doctor", None, &[("Authorization", "Bearer s3cret-doctor")])
                })
            })
            .collect();
        calls.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let elapsed = started.elapsed();
    for r in &reports {
        assert_eq!(r.status, 200, "{}", r.body);
        let php = r.json()["runtimes"].as_array().unwrap().iter().find(|rt| rt["runtime"] == "php").cloned().unwrap();
        assert_eq!(php["version"], "PHP 8.3.99 (cli) fake", "{php}");
    }
    assert!(elapsed < Duration::from_secs(10), "20 reports took {elapsed:?}, longer than the cache lives");
    assert_eq!(starts(&log), 1, "20 doctor reports within the cache's 10 s started php this many times");
}

/// The attacker: scaffolds a plugin with a 300-character name (a 500 before:
/// the directory name is too long for the file system). Must hold: a 400
/// naming the length, and nothing is created in the plugins dir.
#[test]
fn a_300_character_scaffold_name_is_a_400_and_creates_nothing() {
    let site = Site::new();
    let d = daemon(&site, "", &[], &[]);
    let name = "a".repeat(300);
    let r = d.post("/api/plugins/scaffold", &serde_json::json!({"name": name, "runtime": "bash"}).to_string());
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.json()["error"].as_str().unwrap().contains("300 characters"), "{}", r.body);
    let left: Vec<_> = std::fs::read_dir(site.home().join("plugins")).unwrap().collect();
    assert!(left.is_empty(), "the plugins dir holds {left:?}");
}
