//! ctxhost as LibreFang's sidecar context engine (spec section 10): the same
//! engine `ctxhost run` uses, behind LibreFang's newline-delimited JSON
//! protocol on stdin/stdout, so a LibreFang daemon configured with
//! `[context_engine] engine = "sidecar"` gets ctxhost's plugin stack unchanged.
//!
//! - `wire`: framing — one bounded line in, one reply line out.
//! - `methods`: `bootstrap`, `ingest`, `assemble`, `after_turn` on the engine.
//! - `librefang`: the exact reply shapes LibreFang's serde types parse.
//! - `ids`: UUIDs and RFC 3339 times, written by hand.
//! - `turns`: which agents still have `after_turn` work running.
//! - `fleet`: on a shared store, the calls refused while a stack plugin's
//!   files are not the fleet's version, and the change feed applied.
//!
//! Requests run concurrently and replies go out as they finish (out of order);
//! one writer thread owns stdout, so lines never interleave. Invariants: only
//! reply lines reach the output (logs go to stderr); a bad line gets an error
//! reply when its id can be read and never stops the loop; at end of input
//! every request read is answered and `after_turn` work settles (bounded)
//! before [`serve`] returns.

pub mod fleet;
mod ids;
mod librefang;
mod methods;
mod turns;
mod wire;

use std::io::{BufRead, Write};
use std::sync::Arc;

use tokio::task::JoinSet;

pub use methods::SidecarOptions;
use methods::{Method, Methods};
use wire::{Incoming, MAX_REQUEST_LINE};

use crate::engine::stack::StackEngine;

/// What a session of the sidecar did, for the log.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ServeReport {
    pub requests: u64,
    pub invalid_lines: u64,
    /// `after_turn` work was still running when the settle timeout passed.
    pub settle_timed_out: bool,
}

/// Answers requests from `input` on `output` until `input` ends (or `stop`
/// completes: a signal), then waits for answers and pending `after_turn`
/// work (up to the settle timeout). With `plugins` (the catalog the stack
/// was built from), a call whose hook a refused stack plugin declares gets
/// an error reply naming it ([`fleet`]).
///
/// `input` is read on a thread of its own and `output` written by another,
/// so blocking stdio never holds a runtime worker.
pub async fn serve(
    engine: Arc<StackEngine>,
    plugins: Option<Arc<fleet::Plugins>>,
    input: impl BufRead + Send + 'static,
    output: impl Write + Send + 'static,
    options: SidecarOptions,
    stop: impl std::future::Future<Output = ()>,
) -> ServeReport {
    let (line_tx, mut lines) = tokio::sync::mpsc::channel::<wire::Line>(64);
    let reader = std::thread::Builder::new().name("sidecar-stdin".into()).spawn(move || {
        let mut input = input;
        loop {
            match wire::read_line(&mut input, MAX_REQUEST_LINE) {
                Ok(Some(line)) => {
                    if line_tx.blocking_send(line).is_err() {
                        return;
                    }
                }
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!("sidecar: reading the input failed: {e}; treating it as its end");
                    return;
                }
            }
        }
    });
    if let Err(e) = reader {
        tracing::error!("sidecar: could not start the input thread: {e}");
        return ServeReport::default();
    }
    let (reply_tx, replies) = std::sync::mpsc::channel::<String>();
    let writer =
        std::thread::Builder::new().name("sidecar-stdout".into()).spawn(move || write_replies(output, replies));

    let methods = Arc::new(Methods::new(engine, options));
    let mut report = ServeReport::default();
    let mut running = JoinSet::new();
    tokio::pin!(stop);
    loop {
        let line = tokio::select! {
            line = lines.recv() => match line {
                Some(line) => line,
                None => break,
            },
            () = &mut stop => {
                tracing::info!("sidecar: stopping; answering the requests already read");
                break;
            }
        };
        while let Some(done) = running.try_join_next() {
            log_join(done);
        }
        match wire::parse(&line) {
            Incoming::Blank => {}
            Incoming::Invalid { id, reason } => {
                report.invalid_lines += 1;
                tracing::warn!("sidecar: {reason}");
                if let Some(id) = id {
                    let _ = reply_tx.send(wire::reply(&id, Err(reason)));
                }
            }
            Incoming::Request { id, method, params } => {
                report.requests += 1;
                let Some(method) = Method::parse(&method) else {
                    let error = format!(
                        "unknown method `{method}` (ctxhost sidecar answers bootstrap, ingest, assemble, after_turn)"
                    );
                    let _ = reply_tx.send(wire::reply(&id, Err(error)));
                    continue;
                };
                let refused = plugins.as_ref().and_then(|p| p.refusing(&methods.engine, method.hook()));
                if let Some(refusal) = refused {
                    tracing::warn!("sidecar: `{}` refused: {refusal}", method.name());
                    let _ = reply_tx.send(wire::refused(&id, &refusal, method.hook().as_str()));
                    continue;
                }
                let turn = methods.begin_turn(method, &params);
                let (methods, reply_tx) = (methods.clone(), reply_tx.clone());
                running.spawn(async move {
                    // Its own task, so a panic becomes an error reply, not silence.
                    let call = tokio::spawn(async move { methods.call(method, params, turn).await });
                    let result =
                        call.await.unwrap_or_else(|e| Err(format!("internal error in `{}`: {e}", method.name())));
                    if let Err(e) = &result {
                        tracing::warn!("sidecar: `{}` failed: {e}", method.name());
                    }
                    let _ = reply_tx.send(wire::reply(&id, result));
                });
            }
        }
    }
    while let Some(done) = running.join_next().await {
        log_join(done);
    }
    // Journaled calls not started yet stay for the next start.
    methods.engine.close_journal();
    report.settle_timed_out = !methods.settle_all().await;
    if report.settle_timed_out {
        tracing::warn!(
            "sidecar: after_turn work was still running {:?} after the input ended; stopping it",
            methods.options.settle_timeout
        );
    }
    drop(reply_tx);
    if let Ok(writer) = writer {
        let _ = tokio::task::spawn_blocking(move || writer.join()).await;
    }
    report
}

fn log_join(done: Result<(), tokio::task::JoinError>) {
    if let Err(e) = done {
        tracing::error!("sidecar: a request task failed: {e}");
    }
}

/// The writer thread: one line per reply, flushed once the queue is empty.
/// A closed output ends it (LibreFang is gone; nobody reads the rest).
fn write_replies(mut output: impl Write, replies: std::sync::mpsc::Receiver<String>) {
    fn write_line(output: &mut impl Write, line: &str) -> std::io::Result<()> {
        output.write_all(line.as_bytes())?;
        output.write_all(b"\n")
    }
    while let Ok(line) = replies.recv() {
        let mut result = write_line(&mut output, &line);
        while result.is_ok()
            && let Ok(more) = replies.try_recv()
        {
            result = write_line(&mut output, &more);
        }
        if let Err(e) = result.and_then(|()| output.flush()) {
            tracing::warn!("sidecar: writing a reply failed: {e}; no more replies will be written");
            return;
        }
    }
}
