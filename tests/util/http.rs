//! A running `ctxhost serve` on an ephemeral loopback port, and a minimal
//! HTTP/1.1 client for it (one request per connection, `Connection: close`);
//! [`Client`], what a test asks of the daemon whether it runs as a process
//! ([`Daemon`]) or in-process (`routes::InProcess`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

/// `ctxhost serve` as a child process; stopped (SIGTERM) when dropped.
pub struct Daemon {
    child: Child,
    pub addr: String,
    stderr: Option<std::thread::JoinHandle<String>>,
}

/// One HTTP response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.status, self.body))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// The routes of `ctxhost serve`, over the wire or in-process.
pub trait Client {
    /// One request; `GET` has no body, the others are sent as JSON.
    fn request(&self, method: &str, path: &str, body: Option<&str>, headers: &[(&str, &str)]) -> Response;

    fn get(&self, path: &str) -> Response {
        self.request("GET", path, None, &[])
    }

    fn post(&self, path: &str, body: &str) -> Response {
        self.request("POST", path, Some(body), &[])
    }

    /// Any method (`PUT`, `PATCH`, `DELETE`, …).
    fn send(&self, method: &str, path: &str, body: Option<&str>) -> Response {
        self.request(method, path, body, &[])
    }

    fn post_with(&self, path: &str, body: &str, headers: &[(&str, &str)]) -> Response {
        self.request("POST", path, Some(body), headers)
    }
}

impl Client for Daemon {
    fn request(&self, method: &str, path: &str, body: Option<&str>, headers: &[(&str, &str)]) -> Response {
        request(&self.addr, method, path, body, headers)
    }
}

impl Daemon {
    /// `ctxhost --home <home> serve --addr 127.0.0.1:0 <args>`, once it
    /// prints its address. `envs` are set on the child.
    pub fn start(home: &Path, args: &[&str], envs: &[(&str, &str)]) -> Daemon {
        Daemon::start_with(home, args, envs, |_| {})
    }

    /// As [`Daemon::start`], with `prepare` given the command last (a test
    /// adding a `pre_exec`, say).
    pub fn start_with(home: &Path, args: &[&str], envs: &[(&str, &str)], prepare: impl FnOnce(&mut Command)) -> Daemon {
        let bin = assert_cmd::cargo::cargo_bin("ctxhost");
        let mut cmd = Command::new(bin);
        cmd.env_remove("RUST_LOG")
            .env_remove("CTXHOST_HOME")
            .env_remove("CTXHOST_PLUGINS_DIR")
            .env_remove("CTXHOST_TOKEN")
            .arg("--home")
            .arg(home)
            .args(["serve", "--addr", "127.0.0.1:0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in envs {
            cmd.env(k, v);
        }
        prepare(&mut cmd);
        let mut child = cmd.spawn().expect("spawn ctxhost serve");
        let stderr = child.stderr.take().map(|mut e| {
            std::thread::spawn(move || {
                let mut s = String::new();
                let _ = e.read_to_string(&mut s);
                s
            })
        });
        let mut line = String::new();
        let stdout = child.stdout.take().expect("stdout");
        let mut reader = BufReader::new(stdout);
        reader.read_line(&mut line).expect("read the address line");
        let mut daemon = Daemon { child, addr: String::new(), stderr };
        let Some(addr) = line.trim().strip_prefix("listening on http://") else {
            let _ = daemon.child.wait();
            panic!("ctxhost serve did not start: stdout {line:?}, stderr:\n{}", daemon.take_stderr());
        };
        daemon.addr = addr.to_owned();
        // Keep draining stdout so the daemon never blocks on it.
        std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
        daemon
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    // The `Client` methods without importing the trait (most tests only use a Daemon).
    pub fn get(&self, path: &str) -> Response {
        Client::get(self, path)
    }

    pub fn post(&self, path: &str, body: &str) -> Response {
        Client::post(self, path, body)
    }

    pub fn send(&self, method: &str, path: &str, body: Option<&str>) -> Response {
        Client::send(self, method, path, body)
    }

    pub fn post_with(&self, path: &str, body: &str, headers: &[(&str, &str)]) -> Response {
        Client::post_with(self, path, body, headers)
    }

    /// SIGTERM, then waits; returns whether it exited 0 and its stderr.
    pub fn stop(mut self) -> (bool, String) {
        // SAFETY: kill(2) with a pid we own and a valid signal.
        unsafe { libc::kill(self.pid(), libc::SIGTERM) };
        let status = self.child.wait().expect("wait");
        (status.success(), self.take_stderr())
    }

    fn take_stderr(&mut self) -> String {
        self.stderr.take().and_then(|h| h.join().ok()).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// One request on a fresh connection.
pub fn request(addr: &str, method: &str, path: &str, body: Option<&str>, headers: &[(&str, &str)]) -> Response {
    let mut stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    stream.set_read_timeout(Some(Duration::from_secs(60))).expect("timeout");
    let body = body.unwrap_or("");
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if method != "GET" {
        head.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n", body.len()));
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).expect("write head");
    stream.write_all(body.as_bytes()).expect("write body");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read response");
    parse(&raw)
}

fn parse(raw: &[u8]) -> Response {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no header end in {text:?}"));
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("{status_line}"));
    let headers: Vec<(String, String)> =
        lines.filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned())).collect();
    let chunked = headers.iter().any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let body = if chunked { dechunk(body) } else { body.to_owned() };
    Response { status, headers, body }
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n.min(rest.len())]);
        body = rest.get(n + 2..).unwrap_or("");
    }
    out
}
