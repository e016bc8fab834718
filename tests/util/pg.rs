//! A throw-away PostgreSQL cluster for tests: one per test process, started
//! at the first [`database`] call, and a fresh database per call.
//!
//! The cluster lives in `<tmp>/ctxhost-pg-<pid>-<random>/` (data dir, log,
//! and the unix socket: no TCP port, so parallel test processes never
//! clash), runs with `fsync = off`, and trusts local connections of the
//! superuser `postgres`; every other role authenticates with a password
//! (`scram-sha-256`), so tests can exercise credentials ([`Database::role`]).
//! PostgreSQL refuses to run as root: as root, `initdb` and `postgres` run
//! as uid/gid 65534 (the data dir is given to it).
//!
//! It must never outlive the test process. The postmaster is started
//! directly (not daemonised by `pg_ctl`) as a child of a thread that waits
//! for it all its life, with `PR_SET_PDEATHSIG = SIGQUIT` — an immediate
//! shutdown when that thread, i.e. the test process, goes, however it goes
//! (a panic, an abort, SIGKILL). A normal exit (libtest's, also after failed
//! tests) stops it from an `atexit` handler and removes its directory;
//! directories of dead test processes are removed by the next start.
//!
//! Without PostgreSQL's binaries (looked for in `PATH`, then
//! `/usr/lib/postgresql/<version>/bin`, newest first) the first call panics
//! saying what to install. Self-contained (std, libc, tokio, tokio-postgres):
//! the library's unit tests include it by path as well.

#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// What to install when no cluster can be made.
pub const INSTALL: &str = "apt-get install -y postgresql (Debian/Ubuntu; scripts/test.sh installs it)";

/// The unprivileged user the cluster runs as when the tests run as root.
const NOBODY: u32 = 65534;

/// Directory names of clusters (`ctxhost-pg-<pid>-…`), in the temp dir.
const PREFIX: &str = "ctxhost-pg-";

/// The running cluster.
#[derive(Debug)]
pub struct Cluster {
    /// `<tmp>/ctxhost-pg-<pid>-<random>`: data dir, log, socket.
    pub dir: PathBuf,
    /// The directory holding the socket (`.s.PGSQL.5432`).
    pub socket_dir: PathBuf,
    /// PostgreSQL's binaries.
    pub bin: PathBuf,
    /// The postmaster's pid.
    pub pid: i32,
    /// Its port (the socket's name; TCP too when it has [`Cluster::tls`]).
    pub port: u16,
    /// The certificates of a cluster with TLS on a loopback port.
    pub tls: Option<TlsFiles>,
}

/// A TLS cluster's certificates (PEM files in `<dir>/tls/`).
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The authority that signed the server's certificate.
    pub ca: PathBuf,
    /// Another authority, which signed nothing of the server's.
    pub other_ca: PathBuf,
}

/// One fresh database of the cluster.
#[derive(Debug, Clone)]
pub struct Database {
    /// The cluster it is in.
    pub cluster: &'static Cluster,
    /// Its name (`t<n>`).
    pub name: String,
    /// `postgres://postgres@/<name>?host=<socket dir>`: the superuser, no password.
    pub url: String,
}

static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();
static TLS_CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();
/// The exit handler is registered once, for both clusters.
static AT_EXIT: std::sync::Once = std::sync::Once::new();
static NEXT_DB: AtomicU32 = AtomicU32::new(0);
/// The postmasters' pids once started (read by the exit handler): the plain
/// cluster's and the TLS cluster's.
static POSTMASTER: [AtomicI32; 2] = [AtomicI32::new(0), AtomicI32::new(0)];
/// Set when the thread waiting for a postmaster saw it exit.
static REAPED: [AtomicBool; 2] = [AtomicBool::new(false), AtomicBool::new(false)];

/// The cluster of this test process, started at the first call.
///
/// # Panics
/// No cluster can be started: the message says why and what to install.
pub fn cluster() -> &'static Cluster {
    match CLUSTER.get_or_init(|| start(false)) {
        Ok(c) => c,
        Err(e) => panic!("no PostgreSQL cluster for the tests: {e}"),
    }
}

/// The TLS cluster of this test process, started at the first call: `ssl =
/// on` with a certificate for `localhost` and `127.0.0.1` signed by a test
/// authority ([`TlsFiles`], made with the `openssl` command), listening on
/// a free loopback port; its `pg_hba.conf` accepts TCP connections with TLS
/// only (`hostssl`, a password), and the superuser on the socket.
///
/// # Panics
/// No cluster can be started, or no `openssl` command.
pub fn tls_cluster() -> &'static Cluster {
    match TLS_CLUSTER.get_or_init(|| start(true)) {
        Ok(c) => c,
        Err(e) => panic!("no PostgreSQL cluster with TLS for the tests: {e}"),
    }
}

/// A fresh, empty database in this process's cluster.
///
/// # Panics
/// No cluster (see [`cluster`]), or the database cannot be created.
pub fn database() -> Database {
    database_in(cluster())
}

/// A fresh, empty database in this process's TLS cluster ([`tls_cluster`]).
pub fn tls_database() -> Database {
    database_in(tls_cluster())
}

fn database_in(c: &'static Cluster) -> Database {
    let name = format!("t{}", NEXT_DB.fetch_add(1, Ordering::Relaxed));
    c.execute("postgres", &format!("CREATE DATABASE {name}"))
        .unwrap_or_else(|e| panic!("cannot create database {name}: {e}"));
    Database { cluster: c, url: c.url_for("postgres", None, &name), name }
}

impl Database {
    /// Creates login role `user` with `password`, owning this database's
    /// `public` schema; the URL that names them both (percent-encoded).
    pub fn role(&self, user: &str, password: &str) -> String {
        let c = self.cluster;
        let quoted = password.replace('\'', "''");
        c.execute("postgres", &format!("CREATE ROLE {user} LOGIN PASSWORD '{quoted}'"))
            .unwrap_or_else(|e| panic!("cannot create role {user}: {e}"));
        c.execute(
            &self.name,
            &format!("GRANT ALL ON DATABASE {0} TO {user}; ALTER SCHEMA public OWNER TO {user}", self.name),
        )
        .unwrap_or_else(|e| panic!("cannot grant {} to {user}: {e}", self.name));
        c.url_for(user, Some(password), &self.name)
    }

    /// Runs `sql` (several statements) in this database as the superuser.
    pub fn execute(&self, sql: &str) -> Result<(), String> {
        self.cluster.execute(&self.name, sql)
    }

    /// The rows of `sql`, each column as text (`NULL` as `None`).
    pub fn query(&self, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
        self.cluster.query(&self.name, sql)
    }

    /// `postgres://user:password@<host>:<port>/<name>` over TCP, with
    /// `params` (`sslmode=…&…`) as its query: for a TLS cluster's role.
    pub fn tcp_url(&self, host: &str, user: &str, password: &str, params: &str) -> String {
        let query = if params.is_empty() { String::new() } else { format!("?{params}") };
        format!("postgres://{user}:{}@{host}:{}/{}{query}", percent_encode(password), self.cluster.port, self.name)
    }
}

impl Cluster {
    /// A URL for `user` (and `password`) on database `db`, over the socket.
    pub fn url_for(&self, user: &str, password: Option<&str>, db: &str) -> String {
        let auth = match password {
            Some(p) => format!("{user}:{}", percent_encode(p)),
            None => user.to_owned(),
        };
        let port = if self.port == 5432 { String::new() } else { format!("&port={}", self.port) };
        format!("postgres://{auth}@/{db}?host={}{port}", percent_encode(&self.socket_dir.to_string_lossy()))
    }

    /// Runs `sql` on database `db` as the superuser.
    pub fn execute(&self, db: &str, sql: &str) -> Result<(), String> {
        self.execute_url(&self.url_for("postgres", None, db), sql)
    }

    /// Runs `sql` through `url` (another role, a wrong password).
    pub fn execute_url(&self, url: &str, sql: &str) -> Result<(), String> {
        let (sql, url) = (sql.to_owned(), url.to_owned());
        with_client(url, move |client| async move { client.batch_execute(&sql).await.map_err(|e| text(&e)) })
    }

    /// The rows of `sql` on database `db`, each column as text.
    pub fn query(&self, db: &str, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
        let (sql, url) = (sql.to_owned(), self.url_for("postgres", None, db));
        with_client(url, move |client| async move {
            let msgs = client.simple_query(&sql).await.map_err(|e| text(&e))?;
            Ok(msgs
                .into_iter()
                .filter_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(r) => {
                        Some((0..r.len()).map(|i| r.get(i).map(str::to_owned)).collect())
                    }
                    _ => None,
                })
                .collect())
        })
    }

    /// The server's log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("postgres.log")).unwrap_or_default()
    }
}

/// Runs `f` with a client on `url`, on a thread of its own with its own
/// runtime (callable from sync tests and from inside a runtime alike).
fn with_client<T, F, Fut>(url: String, f: F) -> Result<T, String>
where
    T: Send + 'static,
    F: FnOnce(tokio_postgres::Client) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| text(&e))?;
        rt.block_on(async move {
            let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.map_err(|e| text(&e))?;
            let driver = tokio::spawn(conn);
            let out = f(client).await;
            driver.abort();
            out
        })
    })
    .join()
    .map_err(|_| "the client thread panicked".to_owned())?
}

/// An error with its causes (tokio-postgres says `db error`, the cause says what).
fn text(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(&format!(": {c}"));
        cause = c.source();
    }
    out
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    pid > 0 && unsafe { libc::kill(pid, 0) == 0 || *libc::__errno_location() == libc::EPERM }
}

/// The directory with `initdb` and `postgres`: `PATH`, then Debian's
/// `/usr/lib/postgresql/<version>/bin`, the newest version first.
pub fn bin_dir() -> Result<PathBuf, String> {
    let has = |d: &Path| d.join("initdb").is_file() && d.join("postgres").is_file();
    let path = std::env::var_os("PATH").unwrap_or_default();
    if let Some(d) = std::env::split_paths(&path).find(|d| has(d)) {
        return Ok(d);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .filter(|(_, d)| has(d))
        .collect();
    versions.sort();
    versions.pop().map(|(_, d)| d).ok_or_else(|| {
        format!(
            "PostgreSQL's initdb and postgres are not installed (looked in PATH and /usr/lib/postgresql/*/bin); \
             the store tests run a real cluster: {INSTALL}"
        )
    })
}

/// A command that runs as the cluster's user: 65534 when root, else us.
/// With `die_with_parent`, it gets SIGQUIT when the spawning thread ends.
fn as_cluster_user(program: &Path, die_with_parent: bool) -> Command {
    let mut cmd = Command::new(program);
    let root = is_root();
    // SAFETY: the closure runs between fork and exec and calls only
    // async-signal-safe functions (setgroups, setgid, setuid, prctl) on
    // values computed before the fork; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if root
                && (libc::setgroups(0, std::ptr::null()) != 0 || libc::setgid(NOBODY) != 0 || libc::setuid(NOBODY) != 0)
            {
                return Err(std::io::Error::last_os_error());
            }
            // After the uid change, which clears a parent-death signal.
            if die_with_parent && libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGQUIT as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}

/// Removes the cluster directories of test processes that are gone (their
/// postmaster stopped first, if it still runs).
fn remove_stale(base: &Path) {
    for entry in std::fs::read_dir(base).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(PREFIX).and_then(|r| r.split('-').next()).and_then(|p| p.parse().ok()) else {
            continue;
        };
        if alive(pid) {
            continue;
        }
        let pidfile = entry.path().join("data/postmaster.pid");
        if let Some(pm) = std::fs::read_to_string(pidfile).ok().and_then(|t| t.lines().next()?.trim().parse().ok())
            && alive(pm)
        {
            // SAFETY: plain kill(2); a wrong pid is at worst refused.
            unsafe { libc::kill(pm, libc::SIGQUIT) };
            std::thread::sleep(Duration::from_millis(200));
        }
        let _ = std::fs::remove_dir_all(entry.path());
    }
}

extern "C" fn stop_at_exit() {
    for (i, cell) in [&CLUSTER, &TLS_CLUSTER].into_iter().enumerate() {
        let pid = POSTMASTER[i].load(Ordering::SeqCst);
        if pid <= 0 {
            continue;
        }
        // SAFETY: plain kill(2) of our own child.
        unsafe { libc::kill(pid, libc::SIGQUIT) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !REAPED[i].load(Ordering::SeqCst) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if let Some(Ok(c)) = cell.get() {
            let _ = std::fs::remove_dir_all(&c.dir);
        }
    }
}

/// Makes a test authority and a server certificate it signed (for
/// `localhost` and `127.0.0.1`), and a second authority, in `dir` with the
/// `openssl` command; the server's key readable by the cluster's user only.
fn make_certificates(dir: &Path, root: bool) -> Result<TlsFiles, String> {
    let openssl = |args: &[&str]| -> Result<(), String> {
        let out = Command::new("openssl").args(args).current_dir(dir).output().map_err(|e| {
            format!("cannot run openssl ({e}): the TLS tests make their certificates with it; {INSTALL}")
        })?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!("openssl {args:?} failed: {}", String::from_utf8_lossy(&out.stderr)))
        }
    };
    let ca = |name: &str| {
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN=ctxhost test {name}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.crt"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ])
    };
    ca("ca")?;
    ca("other-ca")?;
    openssl(&[
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ])?;
    std::fs::write(
        dir.join("server.ext"),
        "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n\
         subjectAltName=DNS:localhost,IP:127.0.0.1\n",
    )
    .map_err(|e| e.to_string())?;
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "server.ext",
        "-out",
        "server.crt",
    ])?;
    let key = dir.join("server.key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).map_err(|e| e.to_string())?;
    if root {
        for f in [&key, &dir.join("server.crt"), &dir.to_path_buf()] {
            std::os::unix::fs::chown(f, Some(NOBODY), Some(NOBODY)).map_err(|e| e.to_string())?;
        }
    }
    Ok(TlsFiles { ca: dir.join("ca.crt"), other_ca: dir.join("other-ca.crt") })
}

/// A free loopback port (free when asked; the cluster takes it right after).
fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    l.local_addr().map(|a| a.port()).map_err(|e| e.to_string())
}

fn start(tls: bool) -> Result<Cluster, String> {
    let slot = usize::from(tls);
    let bin = bin_dir()?;
    let root = is_root();
    // As root the cluster's user must reach its directory: /tmp, not a
    // TMPDIR that may sit under /root.
    let base = if root { PathBuf::from("/tmp") } else { std::env::temp_dir() };
    remove_stale(&base);
    let dir = tempfile::Builder::new()
        .prefix(&format!("{PREFIX}{}-", std::process::id()))
        .tempdir_in(&base)
        .map_err(|e| format!("cannot make a directory in {}: {e}", base.display()))?
        .keep();
    let fail = |what: String| {
        let _ = std::fs::remove_dir_all(&dir);
        what
    };
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).map_err(|e| fail(e.to_string()))?;
    if root {
        std::os::unix::fs::chown(&dir, Some(NOBODY), Some(NOBODY)).map_err(|e| fail(e.to_string()))?;
    }
    let data = dir.join("data");
    let out = as_cluster_user(&bin.join("initdb"), false)
        .arg("-D")
        .arg(&data)
        .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"])
        .env("TZ", "UTC")
        .current_dir(&dir)
        .output()
        .map_err(|e| fail(format!("cannot run {}: {e}; {INSTALL}", bin.join("initdb").display())))?;
    if !out.status.success() {
        return Err(fail(format!(
            "initdb failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    // The superuser is trusted on the socket; every other role gives a
    // password; over TCP (the TLS cluster's) only with TLS.
    let hba = if tls {
        "local all postgres trust\nlocal all all scram-sha-256\nhostssl all all 127.0.0.1/32 scram-sha-256\n"
    } else {
        "local all postgres trust\nlocal all all scram-sha-256\n"
    };
    std::fs::write(data.join("pg_hba.conf"), hba).map_err(|e| fail(format!("cannot write pg_hba.conf: {e}")))?;
    let (port, files) = if tls {
        let tls_dir = dir.join("tls");
        std::fs::create_dir(&tls_dir).map_err(|e| fail(e.to_string()))?;
        (free_port().map_err(&fail)?, Some(make_certificates(&tls_dir, root).map_err(&fail)?))
    } else {
        (5432, None)
    };
    let log_path = dir.join("postgres.log");
    let log = std::fs::File::create(&log_path).map_err(|e| fail(e.to_string()))?;
    if root {
        std::os::unix::fs::chown(&log_path, Some(NOBODY), Some(NOBODY)).map_err(|e| fail(e.to_string()))?;
    }
    let log2 = log.try_clone().map_err(|e| fail(e.to_string()))?;
    let mut cmd = as_cluster_user(&bin.join("postgres"), true);
    cmd.arg("-D")
        .arg(&data)
        .arg("-k")
        .arg(&dir)
        .args(["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", &format!("port={port}")])
        .args(["-c", "full_page_writes=off", "-c", "max_connections=300", "-c", "shared_buffers=32MB"])
        .args(["-c", "max_locks_per_transaction=256"])
        .args(if tls {
            let tls_dir = dir.join("tls");
            vec![
                "-c".to_owned(),
                "listen_addresses=127.0.0.1".to_owned(),
                "-c".to_owned(),
                "ssl=on".to_owned(),
                "-c".to_owned(),
                format!("ssl_cert_file={}", tls_dir.join("server.crt").display()),
                "-c".to_owned(),
                format!("ssl_key_file={}", tls_dir.join("server.key").display()),
            ]
        } else {
            vec!["-c".to_owned(), "listen_addresses=".to_owned()]
        })
        .env("TZ", "UTC")
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2);
    // The postmaster is the child of a thread that waits for it as long as
    // it runs: its parent-death signal fires when this process goes.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("pg-cluster".into())
        .spawn(move || match cmd.spawn() {
            Ok(mut child) => {
                let pid = child.id() as i32;
                POSTMASTER[slot].store(pid, Ordering::SeqCst);
                let _ = tx.send(Ok(pid));
                let _ = child.wait();
                REAPED[slot].store(true, Ordering::SeqCst);
            }
            Err(e) => {
                let _ = tx.send(Err(e.to_string()));
            }
        })
        .map_err(|e| fail(e.to_string()))?;
    let pid = rx
        .recv()
        .map_err(|e| fail(e.to_string()))?
        .map_err(|e| fail(format!("cannot start {}: {e}", bin.join("postgres").display())))?;
    AT_EXIT.call_once(|| {
        // SAFETY: registering a handler that touches only statics and the file system.
        unsafe { libc::atexit(stop_at_exit) };
    });
    let cluster = Cluster { socket_dir: dir.clone(), dir: dir.clone(), bin, pid, port, tls: files };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match cluster.execute("postgres", "SELECT 1") {
            Ok(()) => return Ok(cluster),
            Err(e) if REAPED[slot].load(Ordering::SeqCst) || Instant::now() > deadline => {
                let log = cluster.log();
                // SAFETY: plain kill(2) of our own child.
                unsafe { libc::kill(pid, libc::SIGQUIT) };
                return Err(fail(format!("postgres did not start ({e}); its log:\n{log}")));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}
