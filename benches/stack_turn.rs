//! One turn through a 3-layer stack of native hooks.
//!
//! Run: `cargo bench --bench stack_turn`. A turn is ingest → assemble →
//! after_turn (→ settle), as `ctxhost run` drives it. Yardsticks in the same
//! run: the same turn on the built-in engine alone, and the six bare spawns
//! of the native hook the stack makes per turn (3 ingest + 3 after_turn).
//! The memory is seeded with 2,000 notes first, so recall searches a real store.

// A benchmark: a panic is a failed run, not a crash of ctxhost.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/util/examples.rs"]
mod examples;
mod support;

use std::path::Path;

use criterion::{Criterion, criterion_group};
use ctxhost::engine::ContextEngine;
use ctxhost::engine::stack::StackEngine;
use ctxhost::home::Home;
use ctxhost::protocol::{AfterTurnRequest, AssembleRequest, IngestRequest, Message, Role};

fn engine(root: &Path, layers: &[&str]) -> StackEngine {
    let home = Home::at(root);
    for name in layers {
        examples::copy_example("native-memory", &home.plugins_dir().join(name));
    }
    support::load_stack_engine(&home, "", layers)
}

async fn turn(engine: &StackEngine, history: &[Message], i: usize) {
    let _ = i;
    let message = "what grows in my garden?".to_owned();
    let ingest = IngestRequest { agent_id: "bench".into(), message: message.clone(), ..Default::default() };
    let memories = engine.ingest(&ingest).await.unwrap();
    let mut messages = history.to_vec();
    messages.push(Message::text(Role::User, message));
    let assemble = AssembleRequest {
        agent_id: "bench".into(),
        system_prompt: format!("You are helpful. {} memories.", memories.len()),
        messages: messages.clone(),
        context_window_tokens: 8000,
        ..Default::default()
    };
    engine.assemble(&assemble).await.unwrap();
    // after_turn gets the assistant's reply only: the plugins and the built-in
    // memory store nothing new, so every iteration measures the same work.
    let after = AfterTurnRequest {
        agent_id: "bench".into(),
        messages: vec![Message::text(Role::Assistant, "Noted.")],
        ..Default::default()
    };
    engine.after_turn(&after).await.unwrap();
    engine.settle().await;
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let history: Vec<Message> = (0..20)
        .map(|i| {
            Message::text(
                if i % 2 == 0 { Role::User } else { Role::Assistant },
                format!("earlier message {i} about the garden"),
            )
        })
        .collect();
    let root = tempfile::tempdir().unwrap();
    let stacked = engine(&root.path().join("stack"), &["n1", "n2", "n3"]);
    let alone = engine(&root.path().join("alone"), &[]);
    let bin = root.path().join("stack/plugins/n1/bin/native-memory");
    let dir = root.path().join("stack/plugins/n1");
    for e in [&stacked, &alone] {
        rt.block_on(async {
            let notes: Vec<Message> = (0..2000)
                .map(|n| {
                    Message::text(
                        Role::User,
                        format!(
                            "note {n}: the {} needs {} this week",
                            ["garden", "kitchen", "car", "roof"][n % 4],
                            ["water", "paint", "oil", "repairs"][n % 4]
                        ),
                    )
                })
                .collect();
            e.after_turn(&AfterTurnRequest { agent_id: "bench".into(), messages: notes, ..Default::default() })
                .await
                .unwrap();
            e.settle().await;
        });
    }
    let mut g = c.benchmark_group("stack_turn");
    let mut i = 0;
    g.bench_function("builtin_engine_alone", |b| {
        b.iter(|| {
            i += 1;
            rt.block_on(turn(&alone, &history, i))
        })
    });
    g.bench_function("three_native_layers", |b| {
        b.iter(|| {
            i += 1;
            rt.block_on(turn(&stacked, &history, i))
        })
    });
    g.bench_function("six_bare_spawns", |b| {
        b.iter(|| {
            for _ in 0..3 {
                examples::run_bare(
                    &bin,
                    &[],
                    &dir,
                    r#"{"type":"ingest","agent_id":"x","message":"garden","peer_id":null}"#,
                );
                examples::run_bare(&bin, &[], &dir, r#"{"type":"after_turn","agent_id":"x","messages":[]}"#);
            }
        })
    });
    g.finish();
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
