//! `GET /metrics`: the engine's per-plugin, per-hook metrics in the
//! Prometheus text exposition format (version 0.0.4). Only rendering lives
//! here; the numbers are [`crate::metrics`]'s.

use std::fmt::Write;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use super::AppState;
use crate::metrics::{HookHistogram, JournalCounts};

pub(crate) async fn metrics(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    let metrics = state.engine.metrics();
    let mut text = render(&metrics.histograms(), &state.engine.layer_names());
    let name = "ctxhost_memory_write_failures_total";
    let _ = writeln!(
        text,
        "# HELP {name} after_turn writes to the built-in memory that failed (the caller got an error).\n\
         # TYPE {name} counter\n{name} {}",
        metrics.memory_write_failures()
    );
    render_journal(&mut text, metrics.journal());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text)
}

/// The after_turn journal's host-wide counters.
fn render_journal(out: &mut String, j: JournalCounts) {
    let counters = [
        (
            "ctxhost_journal_replays_total",
            "after_turn calls journaled by another or an earlier ctxhost process and run here.",
            j.replays,
        ),
        ("ctxhost_journal_retries_total", "after_turn calls run again after a failed attempt.", j.retries),
        (
            "ctxhost_journal_dead_letters_total",
            "after_turn calls that used up their attempts and were kept as dead letters.",
            j.dead_letters,
        ),
        (
            "ctxhost_journal_append_failures_total",
            "Turns whose plugin calls could not be journaled (the caller got an error).",
            j.append_failures,
        ),
    ];
    for (name, help, value) in counters {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}");
    }
}

/// A counter family: name, help text, and its value for one plugin's hook.
type Counter = (&'static str, &'static str, fn(&HookHistogram) -> u64);

/// The exposition text for `hooks` and the active layers.
pub(crate) fn render(hooks: &[HookHistogram], layers: &[String]) -> String {
    let mut out = String::new();
    let counters: [Counter; 6] = [
        ("ctxhost_hook_calls_total", "Hook calls per plugin and hook.", |h| h.calls),
        ("ctxhost_hook_successes_total", "Hook calls that answered.", |h| h.successes),
        ("ctxhost_hook_failures_total", "Hook calls that failed (fallbacks included).", |h| h.failures),
        ("ctxhost_hook_fallbacks_total", "Failed hook calls the engine answered with a fallback.", |h| h.fallbacks),
        ("ctxhost_worker_respawns_total", "Persistent workers replaced after a fault.", |h| h.worker_respawns),
        ("ctxhost_worker_retries_total", "Calls retried on a fresh persistent worker.", |h| h.worker_retries),
    ];
    for (name, help, value) in counters {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for h in hooks {
            let _ = writeln!(out, "{name}{{{}}} {}", labels(h), value(h));
        }
    }
    let name = "ctxhost_hook_duration_seconds";
    let _ = writeln!(out, "# HELP {name} Hook call latency, retries and queueing included.\n# TYPE {name} histogram");
    for h in hooks {
        let labels = labels(h);
        for (le, count) in &h.buckets {
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {count}");
        }
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", h.calls);
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", h.sum_seconds);
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", h.calls);
    }
    let name = "ctxhost_plugin_active";
    let _ = writeln!(out, "# HELP {name} Plugins in the engine's stack (1 each).\n# TYPE {name} gauge");
    for layer in layers {
        let _ = writeln!(out, "{name}{{plugin=\"{}\"}} 1", escape(layer));
    }
    out
}

fn labels(h: &HookHistogram) -> String {
    format!("plugin=\"{}\",hook=\"{}\"", escape(&h.plugin), h.hook.as_str())
}

/// A label value as the format wants it: `\`, `"` and newlines escaped.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{CallOutcome, Metrics};
    use crate::protocol::HookName;
    use std::time::Duration;

    #[test]
    fn exposition_text() {
        let m = Metrics::default();
        m.record("notes", HookName::Ingest, Duration::from_micros(300), CallOutcome::Success);
        m.record("notes", HookName::Ingest, Duration::from_millis(3), CallOutcome::Fallback);
        let mut text = render(&m.histograms(), &["notes".to_owned(), "we\"ird".to_owned()]);
        assert!(text.contains("# TYPE ctxhost_hook_calls_total counter\n"), "{text}");
        assert!(text.contains("ctxhost_hook_calls_total{plugin=\"notes\",hook=\"ingest\"} 2\n"), "{text}");
        assert!(text.contains("ctxhost_hook_fallbacks_total{plugin=\"notes\",hook=\"ingest\"} 1\n"), "{text}");
        assert!(text.contains("# TYPE ctxhost_worker_respawns_total counter\n"), "{text}");
        assert!(text.contains("ctxhost_worker_retries_total{plugin=\"notes\",hook=\"ingest\"} 0\n"), "{text}");
        assert!(
            text.contains("ctxhost_hook_duration_seconds_bucket{plugin=\"notes\",hook=\"ingest\",le=\"0.00025\"} 0\n")
        );
        assert!(
            text.contains("ctxhost_hook_duration_seconds_bucket{plugin=\"notes\",hook=\"ingest\",le=\"0.0005\"} 1\n")
        );
        assert!(
            text.contains("ctxhost_hook_duration_seconds_bucket{plugin=\"notes\",hook=\"ingest\",le=\"0.005\"} 2\n")
        );
        assert!(
            text.contains("ctxhost_hook_duration_seconds_bucket{plugin=\"notes\",hook=\"ingest\",le=\"+Inf\"} 2\n")
        );
        assert!(text.contains("ctxhost_hook_duration_seconds_count{plugin=\"notes\",hook=\"ingest\"} 2\n"));
        assert!(text.contains("ctxhost_plugin_active{plugin=\"we\\\"ird\"} 1\n"), "{text}");
        let mut journal = String::new();
        render_journal(&mut journal, JournalCounts { replays: 2, dead_letters: 1, ..JournalCounts::default() });
        assert!(journal.contains("# TYPE ctxhost_journal_replays_total counter\nctxhost_journal_replays_total 2\n"));
        assert!(journal.contains("ctxhost_journal_dead_letters_total 1\n"), "{journal}");
        text.push_str(&journal);
        // Every sample line is `name{labels} value` with a numeric value.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let value = line.rsplit(' ').next().unwrap();
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }
}
