//! Plugin output for the operator: every line a plugin writes to stderr (a
//! component's stdout too) — the runners log it on the `plugin_stderr`
//! tracing target — kept in one bounded ring, numbered, and served by
//! `GET /api/logs` (poll after a number) and `GET /api/logs/stream`
//! (server-sent events).
//!
//! [`capture_layer`] is the tracing layer that fills the ring; `ctxhost
//! serve` installs it beside its log printer. It must never slow a hook:
//! a line is one short push under a lock never held across anything else,
//! the oldest line makes room (counted in `dropped`), and live readers get
//! lines through a broadcast channel that never waits for a slow reader (a
//! reader that falls behind is told how many lines it skipped).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::{Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::broadcast;

use super::AppState;
use super::body::JsonReply;

/// Lines the ring holds.
pub const CAPACITY: usize = 2048;
/// A longer line is cut here (at a char boundary), with `…`.
pub const MAX_LINE: usize = 2048;
/// Lines one poll returns at most.
const MAX_POLL: usize = 500;
/// Lines a live stream may fall behind before it skips.
const STREAM_LAG: usize = 256;

/// The tracing target the runners log plugin output on.
const TARGET: &str = "plugin_stderr";

/// One line of plugin output.
#[derive(Debug, Clone, Serialize)]
pub struct LogLine {
    pub seq: u64,
    pub ts_ms: u64,
    pub plugin: String,
    /// The hook whose call wrote it (`None` for a component's output).
    pub hook: Option<String>,
    /// A component's `stdout` or `stderr`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<String>,
    pub line: String,
}

#[derive(Default)]
struct Ring {
    lines: VecDeque<Arc<LogLine>>,
    /// The number the next line gets (from 1).
    next: u64,
    /// Lines pushed out by newer ones.
    dropped: u64,
}

/// The process's plugin-output ring.
pub struct LogRing {
    ring: Mutex<Ring>,
    live: broadcast::Sender<Arc<LogLine>>,
}

impl LogRing {
    fn new() -> LogRing {
        let (live, _) = broadcast::channel(STREAM_LAG);
        LogRing { ring: Mutex::new(Ring { next: 1, ..Ring::default() }), live }
    }

    /// Adds a line (cut at [`MAX_LINE`]); the oldest goes when full.
    pub fn push(&self, plugin: String, hook: Option<String>, stream: Option<String>, mut line: String) {
        if line.len() > MAX_LINE {
            let mut cut = MAX_LINE;
            while !line.is_char_boundary(cut) {
                cut -= 1;
            }
            line.truncate(cut);
            line.push('…');
        }
        let ts_ms = now_ms();
        let line = {
            let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
            let line = Arc::new(LogLine { seq: ring.next, ts_ms, plugin, hook, stream, line });
            ring.next += 1;
            if ring.lines.len() == CAPACITY {
                ring.lines.pop_front();
                ring.dropped += 1;
            }
            ring.lines.push_back(line.clone());
            line
        };
        // No receiver is no error; a slow one lags, never blocks this.
        let _ = self.live.send(line);
    }

    /// Up to `limit` lines after `after` (of `plugin` when given), the
    /// ring's dropped count, and how many lines after `after` are gone.
    pub fn after(&self, after: u64, plugin: Option<&str>, limit: usize) -> (Vec<Arc<LogLine>>, u64, u64) {
        let ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        let first_held = ring.lines.front().map_or(ring.next, |l| l.seq);
        let missed = first_held.saturating_sub(after.saturating_add(1));
        let start = ring.lines.partition_point(|l| l.seq <= after);
        let lines =
            ring.lines.range(start..).filter(|l| plugin.is_none_or(|p| l.plugin == p)).take(limit).cloned().collect();
        (lines, ring.dropped, missed)
    }

    fn subscribe(&self) -> broadcast::Receiver<Arc<LogLine>> {
        self.live.subscribe()
    }
}

/// The ring of this process.
pub fn ring() -> &'static LogRing {
    static RING: OnceLock<LogRing> = OnceLock::new();
    RING.get_or_init(LogRing::new)
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// The tracing layer that puts every `plugin_stderr` event into [`ring`],
/// whatever the printer's level (its own filter takes that target only).
pub fn capture_layer<S>() -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    use tracing_subscriber::Layer as _;
    Capture.with_filter(tracing_subscriber::filter::Targets::new().with_target(TARGET, tracing::Level::TRACE))
}

struct Capture;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Capture {
    fn on_event(&self, event: &tracing::Event<'_>, _cx: tracing_subscriber::layer::Context<'_, S>) {
        if event.metadata().target() != TARGET {
            return;
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        if let Some(plugin) = fields.plugin {
            ring().push(plugin, fields.hook, fields.stream, fields.message);
        }
    }
}

#[derive(Default)]
struct Fields {
    plugin: Option<String>,
    hook: Option<String>,
    stream: Option<String>,
    message: String,
}

impl tracing::field::Visit for Fields {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        match field.name() {
            "plugin" => self.plugin = Some(value.to_owned()),
            "hook" => self.hook = Some(value.to_owned()),
            "stream" => self.stream = Some(value.to_owned()),
            "message" => self.message = value.to_owned(),
            _ => {}
        }
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        // `%hook` and the message arrive as Display wrapped in Debug.
        self.record_str(field, &format!("{value:?}"));
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct LogQuery {
    plugin: Option<String>,
    #[serde(default)]
    after: u64,
    limit: Option<usize>,
    /// Stream only: `false` ends the stream after the lines held.
    follow: Option<bool>,
}

/// `GET /api/logs?plugin=&after=&limit=`: the held lines after `after`.
pub(crate) async fn poll(Query(q): Query<LogQuery>) -> JsonReply {
    let limit = q.limit.unwrap_or(MAX_POLL).clamp(1, MAX_POLL);
    let plugin = q.plugin.as_deref().filter(|p| !p.is_empty());
    let (lines, dropped, missed) = ring().after(q.after, plugin, limit);
    let next = lines.last().map_or(q.after, |l| l.seq);
    let lines: Vec<&LogLine> = lines.iter().map(|l| &**l).collect();
    JsonReply::ok(json!({"lines": lines, "next": next, "dropped": dropped, "missed": missed}))
}

/// `GET /api/logs/stream?plugin=&after=&follow=`: the held lines after
/// `after`, then each new one as it is written (event `line`, id its
/// number); `dropped` events say how many this stream skipped. Ends when
/// the daemon stops (or, with `follow=false`, after the held lines).
pub(crate) async fn stream(State(state): State<Arc<AppState>>, Query(q): Query<LogQuery>) -> axum::response::Response {
    use axum::response::IntoResponse;
    let plugin = q.plugin.filter(|p| !p.is_empty());
    // Subscribed before the held lines are read: nothing falls between.
    let live = ring().subscribe();
    let (held, _, missed) = ring().after(q.after, plugin.as_deref(), CAPACITY);
    let (tx, rx) = tokio::sync::mpsc::channel::<Out>(STREAM_LAG);
    let from = Held { lines: held, missed, after: q.after, plugin, follow: q.follow.unwrap_or(true) };
    tokio::spawn(forward(from, live, state.stopping.subscribe(), tx));
    Sse::new(Events(rx))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)).text("keepalive"))
        .into_response()
}

/// What one stream starts from.
struct Held {
    lines: Vec<Arc<LogLine>>,
    /// Lines after `after` already gone.
    missed: u64,
    after: u64,
    plugin: Option<String>,
    /// Go on with the live lines after the held ones.
    follow: bool,
}

/// One event of a log stream.
#[derive(Debug)]
enum Out {
    Line(Arc<LogLine>),
    /// This stream skipped that many lines.
    Dropped(u64),
}

/// Sends the held lines, then (when following) each live line of the
/// stream's plugin, until the reader goes or the daemon stops; a reader
/// that fell behind the broadcast is sent how many lines it skipped.
async fn forward(
    from: Held,
    mut live: broadcast::Receiver<Arc<LogLine>>,
    mut stopping: tokio::sync::watch::Receiver<bool>,
    tx: tokio::sync::mpsc::Sender<Out>,
) {
    if from.missed > 0 && tx.send(Out::Dropped(from.missed)).await.is_err() {
        return;
    }
    let mut last = from.after;
    for l in from.lines {
        last = l.seq;
        if tx.send(Out::Line(l)).await.is_err() {
            return;
        }
    }
    if !from.follow || *stopping.borrow_and_update() {
        return;
    }
    loop {
        let next = tokio::select! {
            r = live.recv() => r,
            _ = stopping.changed() => return,
            () = tx.closed() => return,
        };
        let out = match next {
            Ok(l) if l.seq <= last || from.plugin.as_deref().is_some_and(|p| l.plugin != p) => continue,
            Ok(l) => {
                last = l.seq;
                Out::Line(l)
            }
            Err(broadcast::error::RecvError::Lagged(n)) => Out::Dropped(n),
            Err(broadcast::error::RecvError::Closed) => return,
        };
        if tx.send(out).await.is_err() {
            return;
        }
    }
}

/// The stream's events as the SSE body reads them.
struct Events(tokio::sync::mpsc::Receiver<Out>);

impl futures_core::Stream for Events {
    type Item = Result<Event, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            let event = match std::task::ready!(self.0.poll_recv(cx)) {
                None => return Poll::Ready(None),
                Some(Out::Line(l)) => Event::default().event("line").id(l.seq.to_string()).json_data(&*l),
                Some(Out::Dropped(n)) => Ok(Event::default().event("dropped").data(json!({"dropped": n}).to_string())),
            };
            // A line always serialises; one that would not is skipped.
            if let Ok(event) = event {
                return Poll::Ready(Some(Ok(event)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_the_newest_lines_and_counts_the_rest() {
        let ring = LogRing::new();
        for i in 0..CAPACITY + 10 {
            let plugin = if i % 2 == 0 { "even" } else { "odd" };
            ring.push(plugin.into(), Some("ingest".into()), None, format!("line {i}"));
        }
        let (lines, dropped, missed) = ring.after(0, None, usize::MAX);
        assert_eq!((lines.len(), dropped, missed), (CAPACITY, 10, 10));
        assert_eq!(lines[0].line, "line 10");
        assert_eq!(lines[0].seq, 11);
        let (lines, _, missed) = ring.after(CAPACITY as u64, Some("odd"), 3);
        assert_eq!(missed, 0);
        assert_eq!(lines.iter().map(|l| l.line.as_str()).collect::<Vec<_>>(), ["line 2049", "line 2051", "line 2053"]);
        let (lines, _, _) = ring.after((CAPACITY + 10) as u64, None, 10);
        assert!(lines.is_empty(), "nothing after the last line");
    }

    #[tokio::test]
    async fn a_stream_that_falls_behind_is_told_how_many_lines_it_skipped() {
        let ring = LogRing::new();
        let live = ring.subscribe();
        // The reader is slow: the broadcast holds STREAM_LAG lines, 10 more are pushed.
        for i in 0..STREAM_LAG + 10 {
            ring.push("p".into(), None, None, format!("line {i}"));
        }
        let (stop, stopping) = tokio::sync::watch::channel(false);
        let (tx, mut rx) = tokio::sync::mpsc::channel(4 * STREAM_LAG);
        let from = Held { lines: Vec::new(), missed: 0, after: 0, plugin: None, follow: true };
        let task = tokio::spawn(forward(from, live, stopping, tx));
        let first = rx.recv().await.unwrap();
        assert!(matches!(first, Out::Dropped(10)), "{first:?}");
        let Some(Out::Line(l)) = rx.recv().await else { panic!("a line next") };
        assert_eq!(l.line, "line 10");
        stop.send_replace(true);
        tokio::time::timeout(Duration::from_secs(5), task).await.unwrap().unwrap();
    }

    #[test]
    fn a_long_line_is_cut_at_a_char_boundary() {
        let ring = LogRing::new();
        ring.push("p".into(), None, Some("stderr".into()), "é".repeat(MAX_LINE));
        let (lines, _, _) = ring.after(0, None, 1);
        assert!(lines[0].line.len() <= MAX_LINE + '…'.len_utf8());
        assert!(lines[0].line.ends_with('…'));
    }
}
