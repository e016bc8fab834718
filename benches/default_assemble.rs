//! The built-in `assemble` on a 200k-token history.
//!
//! Run: `cargo bench --bench default_assemble`. Goal: under 20 ms per call once
//! token counts are cached (every turn after the first). Yardsticks in the
//! same run: cloning the history (the floor: assemble returns the messages it
//! keeps) and the first, uncached call (every message tokenised).

// A benchmark: a panic is a failed run, not a crash of ctxhost.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::Instant;

use criterion::{Criterion, criterion_group};
use ctxhost::engine::ContextEngine;
use ctxhost::engine::default::{DefaultEngine, DefaultSettings};
use ctxhost::protocol::{AssembleRequest, Message, Role};

/// About 200k tokens of varied, prose-like text: 200 messages of ~1000
/// tokens, words made of pseudo-random syllables (a fixed seed, so every run
/// measures the same history).
fn history() -> Vec<Message> {
    const SYLLABLES: [&str; 24] = [
        "ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "pre", "con", "ing", "tion", "al", "er", "ou", "st", "gr",
        "ph", "th", "ea", "qu", "ly", "ment", "ive",
    ];
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    (0..200)
        .map(|i| {
            let mut text = String::new();
            for w in 0..520 {
                let syllables = 1 + next() % 3;
                for _ in 0..syllables {
                    text.push_str(SYLLABLES[(next() % SYLLABLES.len() as u64) as usize]);
                }
                text.push(if w % 12 == 11 { '.' } else { ' ' });
                if w % 12 == 11 {
                    text.push(' ');
                }
            }
            Message::text(if i % 2 == 0 { Role::User } else { Role::Assistant }, text)
        })
        .collect()
}

fn new_engine() -> (tempfile::TempDir, DefaultEngine) {
    let dir = tempfile::tempdir().unwrap();
    let engine = DefaultEngine::open(&dir.path().join("memory.db"), DefaultSettings::default()).unwrap();
    (dir, engine)
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let messages = history();
    let (_dir, engine) = new_engine();
    let tokens = engine.counter().messages(&messages);
    println!("history: {} messages, {tokens} tokens (o200k_base)", messages.len());
    let request = AssembleRequest {
        agent_id: "bench".into(),
        system_prompt: "You are a helpful assistant.".into(),
        messages,
        context_window_tokens: 128_000,
        ..Default::default()
    };
    let mut g = c.benchmark_group("default_assemble_200k");
    g.bench_function("clone_history", |b| b.iter(|| black_box(request.messages.clone())));
    g.bench_function("cached", |b| b.iter(|| rt.block_on(engine.assemble(black_box(&request))).unwrap()));
    g.sample_size(10);
    g.bench_function("uncached_first_call", |b| {
        b.iter_custom(|iters| {
            let mut total = std::time::Duration::ZERO;
            for _ in 0..iters {
                let (_dir, fresh) = new_engine();
                let t = Instant::now();
                black_box(rt.block_on(fresh.assemble(&request)).unwrap());
                total += t.elapsed();
            }
            total
        })
    });
    g.finish();
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
