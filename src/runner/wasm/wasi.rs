//! What a component sees of the host through WASI, decided per call from its
//! [`Limits`]: no arguments, no environment but `[sandbox] env`, preopens only
//! for `[sandbox] dirs` (read-only unless granted `rw`), no network (TCP, UDP
//! and name lookups refused explicitly, no address passes the check); stdout
//! and stderr captured, their last 64 KiB kept per call and sent to tracing
//! (target `plugin_stderr`).
//!
//! Owns the WASI context and the guest's output streams. Never grants what
//! `Limits` does not name, never lets a guest block on or fill a host stream,
//! and never decides what an error means (that is `trap`).

use std::sync::Arc;

use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::store::{Limits, State};
use crate::manifest::DirMode;
use crate::runner::HookError;

/// What a guest printed during one call. The host has no console to give
/// it: both streams are captured and go to tracing (target `plugin_stderr`,
/// as a script's stderr does), and stderr also explains a panic.
pub(super) struct GuestOutput {
    pub(super) stdout: TailPipe,
    pub(super) stderr: TailPipe,
}

impl GuestOutput {
    pub(super) fn log(&self, plugin: &str) {
        for (stream, pipe) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            let (bytes, dropped) = pipe.contents();
            if dropped > 0 {
                tracing::info!(target: "plugin_stderr", plugin, stream, "[{dropped} earlier bytes dropped]");
            }
            for line in String::from_utf8_lossy(&bytes).lines().filter(|l| !l.trim().is_empty()) {
                tracing::info!(target: "plugin_stderr", plugin, stream, "{line}");
            }
        }
    }
}

/// Captured guest output per stream, per call: the last this many bytes.
pub(super) const STDERR_CAP: usize = 64 * 1024;

/// A guest output stream that keeps its last `cap` bytes: a guest never sees
/// it full (writes always succeed), and what it wrote last — a panic's cause
/// — is what is kept.
#[derive(Clone)]
pub(super) struct TailPipe {
    cap: usize,
    kept: Arc<std::sync::Mutex<(std::collections::VecDeque<u8>, usize)>>,
}

impl TailPipe {
    fn new(cap: usize) -> TailPipe {
        TailPipe { cap, kept: Arc::default() }
    }

    fn push(&self, bytes: &[u8]) {
        let mut kept = self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (buf, dropped) = &mut *kept;
        let skip = bytes.len().saturating_sub(self.cap);
        buf.extend(&bytes[skip..]);
        let over = buf.len().saturating_sub(self.cap);
        buf.drain(..over);
        *dropped += skip + over;
    }

    /// The bytes kept, and how many earlier ones were dropped.
    pub(super) fn contents(&self) -> (Vec<u8>, usize) {
        let kept = self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        (kept.0.iter().copied().collect(), kept.1)
    }
}

impl wasmtime_wasi::cli::IsTerminal for TailPipe {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl wasmtime_wasi::cli::StdoutStream for TailPipe {
    fn p2_stream(&self) -> Box<dyn wasmtime_wasi::p2::OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl wasmtime_wasi::p2::OutputStream for TailPipe {
    fn write(&mut self, bytes: bytes::Bytes) -> Result<(), wasmtime_wasi::p2::StreamError> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), wasmtime_wasi::p2::StreamError> {
        Ok(())
    }

    fn check_write(&mut self) -> Result<usize, wasmtime_wasi::p2::StreamError> {
        Ok(self.cap)
    }
}

#[wasmtime_wasi::async_trait]
impl wasmtime_wasi::p2::Pollable for TailPipe {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for TailPipe {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.push(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// The WASI context of one call and the streams it writes to.
pub(super) fn context(limits: &Limits) -> Result<(WasiCtx, GuestOutput), HookError> {
    let output = GuestOutput { stdout: TailPipe::new(STDERR_CAP), stderr: TailPipe::new(STDERR_CAP) };
    let mut wasi = WasiCtxBuilder::new();
    wasi.stdout(output.stdout.clone()).stderr(output.stderr.clone());
    // No network, said explicitly rather than left to wasmtime's defaults:
    // no TCP, no UDP, no name lookups, and no address passes the check.
    wasi.allow_tcp(false).allow_udp(false).allow_ip_name_lookup(false);
    wasi.socket_addr_check(|_, _| Box::pin(async { false }));
    for (k, v) in &limits.env {
        wasi.env(k, v);
    }
    for d in &limits.dirs {
        let perms = match d.mode {
            DirMode::Ro => wasmtime_wasi::FsPerms::ReadOnly,
            DirMode::Rw => wasmtime_wasi::FsPerms::ReadWrite,
        };
        wasi.preopened_dir(&d.host, &d.guest, perms)
            .map_err(|e| HookError::Launch(format!("cannot grant `{}` as `{}`: {e}", d.host.display(), d.guest)))?;
    }
    Ok((wasi.build(), output))
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guest_output_keeps_its_last_bytes_and_counts_the_rest() {
        let pipe = TailPipe::new(8);
        pipe.push(b"0123");
        pipe.push(b"456789");
        assert_eq!(pipe.contents(), (b"23456789".to_vec(), 2));
        pipe.push(b"a very long write");
        assert_eq!(pipe.contents(), (b"ng write".to_vec(), 2 + 8 + 9));
    }
}
