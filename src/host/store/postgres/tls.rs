//! TLS to PostgreSQL, as libpq reads it from a connection string: the
//! `sslmode` (`disable`, `prefer` — the default —, `require`, `verify-ca`,
//! `verify-full`) and `sslrootcert` parameters of the URL (or of a
//! `key=value` string), else `PGSSLMODE` / `PGSSLROOTCERT`, turned into
//! tokio-postgres's [`SslMode`] and a rustls connector
//! ([`tokio_postgres_rustls::MakeRustlsConnect`], ring's crypto). Every
//! PostgreSQL connection of ctxhost (the store's pool, its migration
//! connection, the change feed's listener, the built-in memory's pool) is
//! made through [`Tls::from_url`].
//!
//! What each mode checks, as libpq does: `prefer` and `require` encrypt
//! without checking the server's certificate (`require` with an explicit
//! `sslrootcert` checks it as `verify-ca`); `verify-ca` checks that the
//! certificate chains to a certificate in `sslrootcert`; `verify-full` also
//! that it names the host connected to. Without `sslrootcert` the verify
//! modes read `~/.postgresql/root.crt`. A connection over a unix socket
//! never uses TLS (PostgreSQL offers none there), whatever the mode.
//!
//! Must never: accept a certificate a verify mode refuses, read a file the
//! URL does not name (besides libpq's default root file), or put the URL's
//! password in an error (errors name parameters and files only).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{WebPkiServerVerifier, verify_server_cert_signed_by_trust_anchor};
use rustls::crypto::{WebPkiSupportedAlgorithms, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres::Config;
use tokio_postgres::config::{Host, SslMode as PgSslMode};
use tokio_postgres_rustls::MakeRustlsConnect;

/// The connector every connection is made with.
pub type Connector = MakeRustlsConnect;

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SslMode {
    /// No TLS.
    Disable,
    /// TLS when the server offers it, unchecked; else plain.
    #[default]
    Prefer,
    /// TLS or no connection; the certificate unchecked (checked as
    /// `verify-ca` when `sslrootcert` is given).
    Require,
    /// TLS; the certificate chains to `sslrootcert`.
    VerifyCa,
    /// TLS; the certificate chains to `sslrootcert` and names the host.
    VerifyFull,
}

impl SslMode {
    /// The mode named `text` (libpq's spellings).
    pub fn parse(text: &str) -> Option<SslMode> {
        Some(match text {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }

    /// libpq's spelling.
    pub fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// What the environment adds when the URL names no TLS setting (as libpq).
#[derive(Debug, Clone, Default)]
pub struct TlsDefaults {
    /// `PGSSLMODE`.
    pub mode: Option<String>,
    /// `PGSSLROOTCERT`.
    pub root_cert: Option<PathBuf>,
    /// libpq's default root file, `~/.postgresql/root.crt` (for the verify modes).
    pub default_root: Option<PathBuf>,
}

impl TlsDefaults {
    /// From the process environment.
    pub fn from_env() -> TlsDefaults {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        TlsDefaults {
            mode: var("PGSSLMODE"),
            root_cert: var("PGSSLROOTCERT").map(PathBuf::from),
            default_root: var("HOME").map(|h| Path::new(&h).join(".postgresql/root.crt")),
        }
    }
}

/// Why no connector could be made (each names the parameter or file).
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("sslmode `{0}` is not one of disable, prefer, require, verify-ca, verify-full (from {1})")]
    BadMode(String, &'static str),
    #[error(
        "sslmode={0} needs the certificate of the authority that signed the server's: give sslrootcert=<a PEM file> (libpq's default {1} does not exist)"
    )]
    NoRoot(&'static str, String),
    #[error("sslrootcert `{path}`: {reason}")]
    Root { path: PathBuf, reason: String },
    #[error(
        "sslrootcert=system is not supported: name a PEM file of the authority that signed the server's certificate"
    )]
    SystemRoot,
    #[error("cannot set up TLS: {0}")]
    Setup(String),
}

/// The TLS settings of one connection string, and the connector.
#[derive(Clone)]
pub struct Tls {
    mode: SslMode,
    root: Option<PathBuf>,
    connector: Connector,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("mode", &self.mode).field("root", &self.root).finish_non_exhaustive()
    }
}

impl Tls {
    /// Takes `sslmode` and `sslrootcert` out of `url` (tokio-postgres knows
    /// neither the verify modes nor `sslrootcert`), reads the root file,
    /// and returns the URL left, for [`Config`], with the TLS settings. Call
    /// [`Tls::apply`] on the parsed config.
    ///
    /// # Errors
    /// An unknown mode, a root file that cannot be read or holds no
    /// certificate, a verify mode without a root file.
    pub fn from_url(url: &str, defaults: &TlsDefaults) -> Result<(String, Tls), TlsError> {
        let (rest, params) = take_params(url, &["sslmode", "sslrootcert"]);
        let mode_text = params.iter().find(|(k, _)| k == "sslmode").map(|(_, v)| v.clone());
        let root_text = params.iter().find(|(k, _)| k == "sslrootcert").map(|(_, v)| v.clone());
        let mode = match (&mode_text, &defaults.mode) {
            (Some(m), _) => SslMode::parse(m).ok_or_else(|| TlsError::BadMode(m.clone(), "the URL"))?,
            (None, Some(m)) => SslMode::parse(m).ok_or_else(|| TlsError::BadMode(m.clone(), "PGSSLMODE"))?,
            (None, None) => SslMode::Prefer,
        };
        let explicit = root_text.map(PathBuf::from).or_else(|| defaults.root_cert.clone());
        if explicit.as_deref() == Some(Path::new("system")) {
            return Err(TlsError::SystemRoot);
        }
        let root = match (mode, explicit) {
            (SslMode::Disable, _) | (SslMode::Prefer, _) => None,
            (_, Some(path)) => Some(path),
            (SslMode::Require, None) => None,
            (SslMode::VerifyCa | SslMode::VerifyFull, None) => match &defaults.default_root {
                Some(path) if path.exists() => Some(path.clone()),
                other => {
                    let shown = other.as_ref().map_or("~/.postgresql/root.crt".to_owned(), |p| p.display().to_string());
                    return Err(TlsError::NoRoot(mode.name(), shown));
                }
            },
        };
        let connector = connector(mode, root.as_deref())?;
        Ok((rest, Tls { mode, root, connector }))
    }

    /// Sets `config`'s TLS mode: none when every host is a unix socket,
    /// else `prefer` or `require` (the verify modes are the connector's).
    pub fn apply(&self, config: &mut Config) {
        let hosts = config.get_hosts();
        let unix_only = !hosts.is_empty() && hosts.iter().all(|h| matches!(h, Host::Unix(_)));
        config.ssl_mode(match self.mode {
            _ if unix_only => PgSslMode::Disable,
            SslMode::Disable => PgSslMode::Disable,
            SslMode::Prefer => PgSslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => PgSslMode::Require,
        });
    }

    /// The connector to make connections with.
    pub fn connector(&self) -> Connector {
        self.connector.clone()
    }

    /// The mode.
    pub fn mode(&self) -> SslMode {
        self.mode
    }
}

/// The rustls connector for `mode`, trusting the certificates of `root`.
fn connector(mode: SslMode, root: Option<&Path>) -> Result<Connector, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let check = match (mode, root) {
        (SslMode::VerifyFull, Some(r)) => Check::Full(roots(r)?, r.to_owned()),
        (SslMode::VerifyCa | SslMode::Require, Some(r)) => Check::Chain(roots(r)?, r.to_owned()),
        _ => Check::Nothing,
    };
    let verifier: Arc<dyn ServerCertVerifier> = match check {
        Check::Full(store, path) => {
            let inner = WebPkiServerVerifier::builder_with_provider(store, provider.clone())
                .build()
                .map_err(|e| TlsError::Root { path: path.clone(), reason: e.to_string() })?;
            Arc::new(Verifier {
                how: How::Full(inner),
                root: Some(path),
                algorithms: provider.signature_verification_algorithms,
            })
        }
        Check::Chain(store, path) => Arc::new(Verifier {
            how: How::Chain(store),
            root: Some(path),
            algorithms: provider.signature_verification_algorithms,
        }),
        Check::Nothing => {
            Arc::new(Verifier { how: How::Nothing, root: None, algorithms: provider.signature_verification_algorithms })
        }
    };
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Setup(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

enum Check {
    Full(Arc<RootCertStore>, PathBuf),
    Chain(Arc<RootCertStore>, PathBuf),
    Nothing,
}

/// The certificates of the PEM file `path`.
fn roots(path: &Path) -> Result<Arc<RootCertStore>, TlsError> {
    let fail = |reason: String| TlsError::Root { path: path.to_owned(), reason };
    let text = std::fs::read(path).map_err(|e| fail(format!("cannot read it: {e}")))?;
    let mut store = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&text) {
        let cert = cert.map_err(|e| fail(format!("not a PEM certificate file: {e}")))?;
        store.add(cert).map_err(|e| fail(format!("holds a certificate that cannot be used: {e}")))?;
    }
    if store.is_empty() {
        return Err(fail("holds no certificate (PEM `BEGIN CERTIFICATE` blocks)".to_owned()));
    }
    Ok(Arc::new(store))
}

/// What a connection checks of the server's certificate.
enum How {
    /// `verify-full`: rustls's own verifier (chain and host name).
    Full(Arc<WebPkiServerVerifier>),
    /// `verify-ca` (and `require` with a root): the chain only.
    Chain(Arc<RootCertStore>),
    /// `prefer`, `require`: nothing (the handshake's signatures still are).
    Nothing,
}

#[derive(Debug)]
struct Verifier {
    how: How,
    root: Option<PathBuf>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl std::fmt::Debug for How {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            How::Full(_) => "Full",
            How::Chain(_) => "Chain",
            How::Nothing => "Nothing",
        })
    }
}

/// A refusal's reason in words, naming the root file.
#[derive(Debug)]
struct Refused(String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

impl Verifier {
    /// `e` with what it means for this connection.
    fn explain(&self, e: rustls::Error) -> rustls::Error {
        let root = self.root.as_ref().map_or_else(String::new, |p| p.display().to_string());
        let reason = match &e {
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => {
                format!("the server's certificate is not signed by a certificate in sslrootcert `{root}`")
            }
            rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            ) => format!(
                "sslmode=verify-full: the server's certificate is not for the host connected to ({e}); connect by a \
                 name the certificate holds, or use sslmode=verify-ca"
            ),
            rustls::Error::InvalidCertificate(c) => format!("the server's certificate is refused: {c}"),
            _ => return e,
        };
        rustls::Error::InvalidCertificate(CertificateError::Other(rustls::OtherError(Arc::new(Refused(reason)))))
    }
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match &self.how {
            How::Nothing => Ok(ServerCertVerified::assertion()),
            How::Full(inner) => inner
                .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
                .map_err(|e| self.explain(e)),
            How::Chain(roots) => {
                let cert = ParsedCertificate::try_from(end_entity).map_err(|e| self.explain(e))?;
                verify_server_cert_signed_by_trust_anchor(&cert, roots, intermediates, now, self.algorithms.all)
                    .map_err(|e| self.explain(e))?;
                Ok(ServerCertVerified::assertion())
            }
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// `text` with `names`' parameters taken out: a URL's query
/// (`postgres://…?sslmode=require&…`, values percent-decoded) or a
/// `key=value` string's pairs (values quoted with `'` or bare). Returns the
/// rest and the pairs taken, in order.
fn take_params(text: &str, names: &[&str]) -> (String, Vec<(String, String)>) {
    let mut taken = Vec::new();
    if text.starts_with("postgres://") || text.starts_with("postgresql://") {
        let Some((head, query)) = text.split_once('?') else { return (text.to_owned(), taken) };
        let mut kept = Vec::new();
        for pair in query.split('&') {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let key = percent_decode(k);
            if names.contains(&key.as_str()) {
                taken.push((key, percent_decode(v)));
            } else {
                kept.push(pair);
            }
        }
        let rest = if kept.is_empty() { head.to_owned() } else { format!("{head}?{}", kept.join("&")) };
        return (rest, taken);
    }
    let mut kept = Vec::new();
    for (key, value) in key_values(text) {
        if names.contains(&key.as_str()) {
            taken.push((key, value));
        } else {
            kept.push(format!("{key}='{}'", value.replace('\\', "\\\\").replace('\'', "\\'")));
        }
    }
    if taken.is_empty() {
        return (text.to_owned(), taken);
    }
    (kept.join(" "), taken)
}

/// The pairs of a libpq `key=value` string (`'`-quoted values, `\` escapes).
fn key_values(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        if key.is_empty() {
            return out;
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next_if_eq(&'=').is_none() {
            out.push((key, String::new()));
            continue;
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            while let Some(c) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next()),
                    '\'' => break,
                    c => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.extend(chars.next());
                } else {
                    value.push(c);
                }
            }
        }
        out.push((key, value));
    }
}

/// `%XX` decoded (a malformed escape kept as written).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = s.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env() -> TlsDefaults {
        TlsDefaults::default()
    }

    #[test]
    fn sslmode_and_sslrootcert_are_taken_out_of_a_url() {
        let (rest, tls) = Tls::from_url("postgres://a:pw@db/x?sslmode=require&connect_timeout=3", &no_env()).unwrap();
        assert_eq!(rest, "postgres://a:pw@db/x?connect_timeout=3");
        assert_eq!(tls.mode(), SslMode::Require);
        let (rest, tls) = Tls::from_url("postgres://a@db/x?sslmode=disable", &no_env()).unwrap();
        assert_eq!((rest.as_str(), tls.mode()), ("postgres://a@db/x", SslMode::Disable));
        let (rest, tls) = Tls::from_url("postgres://a@db/x", &no_env()).unwrap();
        assert_eq!((rest.as_str(), tls.mode()), ("postgres://a@db/x", SslMode::Prefer));
        let (rest, tls) = Tls::from_url("host=db user='a b' sslmode=require dbname=x", &no_env()).unwrap();
        assert_eq!((rest.as_str(), tls.mode()), ("host='db' user='a b' dbname='x'", SslMode::Require));
        let parsed: Config = rest.parse().unwrap();
        assert_eq!(parsed.get_user(), Some("a b"));
    }

    #[test]
    fn a_bad_mode_or_root_is_an_error_naming_it() {
        let e = Tls::from_url("postgres://a@db/x?sslmode=verify", &no_env()).unwrap_err().to_string();
        assert!(e.contains("sslmode `verify` is not one of") && e.contains("the URL"), "{e}");
        let env = TlsDefaults { mode: Some("nope".into()), ..no_env() };
        let e = Tls::from_url("postgres://a@db/x", &env).unwrap_err().to_string();
        assert!(e.contains("PGSSLMODE"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("root.crt");
        let url = format!("postgres://a@db/x?sslmode=verify-full&sslrootcert={}", missing.display());
        let e = Tls::from_url(&url, &no_env()).unwrap_err().to_string();
        assert!(e.contains(&format!("sslrootcert `{}`: cannot read it", missing.display())), "{e}");
        std::fs::write(&missing, "not a certificate\n").unwrap();
        let e = Tls::from_url(&url, &no_env()).unwrap_err().to_string();
        assert!(e.contains("holds no certificate"), "{e}");
        let env = TlsDefaults { default_root: Some(dir.path().join("nothing-here.crt")), ..no_env() };
        let e = Tls::from_url("postgres://a@db/x?sslmode=verify-ca", &env).unwrap_err().to_string();
        assert!(e.contains("sslmode=verify-ca needs") && e.contains("nothing-here.crt"), "{e}");
        // The environment's mode applies when the URL names none; the URL's wins.
        let env = TlsDefaults { mode: Some("disable".into()), ..no_env() };
        assert_eq!(Tls::from_url("postgres://a@db/x", &env).unwrap().1.mode(), SslMode::Disable);
        assert_eq!(Tls::from_url("postgres://a@db/x?sslmode=require", &env).unwrap().1.mode(), SslMode::Require);
    }

    #[test]
    fn a_unix_socket_never_uses_tls() {
        let (rest, tls) = Tls::from_url("postgres://a@/x?host=/run/pg&sslmode=require", &no_env()).unwrap();
        let mut config: Config = rest.parse().unwrap();
        tls.apply(&mut config);
        assert_eq!(config.get_ssl_mode(), PgSslMode::Disable);
        let (rest, tls) = Tls::from_url("postgres://a@db/x?sslmode=require", &no_env()).unwrap();
        let mut config: Config = rest.parse().unwrap();
        tls.apply(&mut config);
        assert_eq!(config.get_ssl_mode(), PgSslMode::Require);
    }

    #[test]
    fn percent_escapes_are_decoded() {
        assert_eq!(percent_decode("/tmp/a%20b%2Fc%zz"), "/tmp/a b/c%zz");
    }
}
