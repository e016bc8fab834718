//! A deliberately hostile component, used only by ctxhost's tests: `ingest`
//! does what its message names, and reports what happened as one memory.
//! Each misbehaviour must end in a clear error (or a refused operation)
//! while the host keeps serving.

use ctxhost_sdk::{Hook, HookError, IngestRequest, Memory, Plugin};

struct Hostile;

fn report(text: String) -> Result<Vec<Memory>, HookError> {
    Ok(vec![Memory { content: text, tags: Vec::new() }])
}

fn outcome<T: std::fmt::Debug, E: std::fmt::Display>(r: Result<T, E>) -> String {
    match r {
        Ok(v) => format!("allowed: {v:?}"),
        Err(e) => format!("denied: {e}"),
    }
}

/// Recursion the optimiser cannot turn into a loop: each frame keeps a
/// buffer alive across the call.
fn recurse(n: u64) -> u64 {
    if std::hint::black_box(n) == u64::MAX {
        return 0;
    }
    let buf = std::hint::black_box([n; 64]);
    let below = recurse(buf[(n % 64) as usize] + 1);
    std::hint::black_box(&buf);
    below.wrapping_add(buf[1])
}

impl Plugin for Hostile {
    const NAME: &'static str = "hostile";
    const HOOKS: &'static [Hook] = &[Hook::Ingest];

    fn ingest(request: IngestRequest) -> Result<Vec<Memory>, HookError> {
        match request.message.as_str() {
            "loop" => {
                let mut x: u64 = 0;
                loop {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            }
            "memory" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            "recursion" => report(format!("{}", recurse(1))),
            "panic" => panic!("the hostile guest gave up on purpose"),
            "read-passwd" => report(outcome(std::fs::read_to_string("/etc/passwd"))),
            "escape" => report(outcome(std::fs::read_to_string("/data/../../../etc/passwd"))),
            "read-granted" => report(outcome(std::fs::read_to_string("/data/hello.txt"))),
            "write-ro" => report(outcome(std::fs::write("/data/planted.txt", "x"))),
            "write-rw" => report(outcome(std::fs::write("/scratch/written.txt", "ok"))),
            "network" => report(outcome(std::net::TcpStream::connect("127.0.0.1:9"))),
            "env" => report(format!("{:?}", std::env::vars().collect::<Vec<_>>())),
            "fail" => Err(HookError::Failed("asked to fail".into())),
            "storage" => {
                // Keys are opaque: a path-like key must not reach outside.
                let key = "../../outside/planted";
                let set = ctxhost_sdk::host::storage_set(key, b"kept");
                let got = ctxhost_sdk::host::storage_get(key);
                let _ = ctxhost_sdk::host::storage_delete("never-set");
                report(format!("{set:?} {:?}", got.map(|b| String::from_utf8_lossy(&b).into_owned())))
            }
            "storage-flood" => {
                // A 10 MB value, then 20,000 keys: how far does the host let it go?
                let big = ctxhost_sdk::host::storage_set("big", &vec![7u8; 10_000_000]);
                let (mut kept, mut refusal) = (0u32, None);
                for i in 0..20_000u32 {
                    match ctxhost_sdk::host::storage_set(&format!("k{i}"), b"v") {
                        Ok(()) => kept += 1,
                        Err(e) => {
                            refusal.get_or_insert(e);
                        }
                    }
                }
                report(format!("big: {}; kept {kept} keys; refusal: {refusal:?}", outcome(big)))
            }
            "storage-long-key" => report(outcome(ctxhost_sdk::host::storage_set(&"k".repeat(200), b"v"))),
            order if order.starts_with("memories:") => {
                // Many tiny memories: cheap in the guest, costly as host objects.
                let n: usize = order[9..].parse().unwrap_or(0);
                Ok((0..n).map(|_| Memory { content: "m".into(), tags: Vec::new() }).collect())
            }
            order if order.starts_with("huge-string:") => report("x".repeat(order[12..].parse().unwrap_or(0))),
            order if order.starts_with("tcp:") => {
                use std::io::Write;
                let connected = std::net::TcpStream::connect(("127.0.0.1", order[4..].parse().unwrap_or(9)));
                report(outcome(connected.and_then(|mut s| s.write_all(b"smuggled"))))
            }
            order if order.starts_with("udp:") => {
                let port: u16 = order[4..].parse().unwrap_or(9);
                let sent =
                    std::net::UdpSocket::bind("127.0.0.1:0").and_then(|s| s.send_to(b"smuggled", ("127.0.0.1", port)));
                report(outcome(sent))
            }
            "noisy-panic" => {
                // Fill the captured stderr first, so the cause comes last.
                for i in 0..1_000 {
                    eprintln!("noise line {i:04}: {}", "=".repeat(80));
                }
                panic!("the cause, after the noise")
            }
            order if order.starts_with("work:") => {
                // Bounded CPU work, for the fuel benchmark.
                let rounds: u64 = order[5..].parse().unwrap_or(0);
                let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
                for i in 0..rounds {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x = x.wrapping_add(std::hint::black_box(i));
                }
                report(format!("{x}"))
            }
            other => report(format!("unknown order `{other}`")),
        }
    }
}

ctxhost_sdk::export_plugin!(Hostile);
