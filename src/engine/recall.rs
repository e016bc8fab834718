//! Recalled memories and the one place they are deduplicated.
//!
//! The built-in memory and every layer of a stack may recall the same thing
//! (two memory plugins and the built-in store all keep what the user said),
//! and the model should see it once. [`dedup`] merges memories whose content
//! is *the same text up to whitespace*: equal after trimming both ends and
//! collapsing every run of whitespace into one space. Case, punctuation and
//! wording still matter ("Basil" and "basil" are two memories); anything
//! looser would merge memories that say different things.
//!
//! The engine calls [`dedup`] once, in `StackEngine::ingest`, so the agent
//! API, the sidecar and `ctxhost run`/`demo` all see the same merged list.
//! This module never stores or recalls anything itself.

use serde::Serialize;

/// A memory handed back by `ingest`, with who recalled it.
///
/// `sources` names every recaller in the order they were merged (`default`
/// for the built-in memory, else the plugin's name); `source` is the first of
/// them, kept for callers written before memories were merged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Recalled {
    pub content: String,
    pub source: String,
    pub sources: Vec<String>,
}

impl Recalled {
    /// A memory recalled by one source.
    pub fn new(content: impl Into<String>, source: impl Into<String>) -> Recalled {
        let source = source.into();
        Recalled { content: content.into(), sources: vec![source.clone()], source }
    }
}

/// The key two memories are "the same content" under: whitespace trimmed at
/// both ends and every inner run of whitespace one space.
pub fn same_content_key(content: &str) -> String {
    content.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Merges memories with the same content (see [`same_content_key`]): the first
/// one stays where it was, with its text as its source wrote it, and the later
/// ones add their sources to it (each source once).
pub fn dedup(recalled: Vec<Recalled>) -> Vec<Recalled> {
    let mut out: Vec<Recalled> = Vec::with_capacity(recalled.len());
    let mut at: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for r in recalled {
        let key = same_content_key(&r.content);
        match at.get(&key) {
            Some(&i) => {
                let kept = &mut out[i];
                for s in r.sources {
                    if !kept.sources.contains(&s) {
                        kept.sources.push(s);
                    }
                }
            }
            None => {
                at.insert(key, out.len());
                out.push(r);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_text_from_three_recallers_is_one_memory_naming_them_in_order() {
        let merged = dedup(vec![
            Recalled::new("My garden has basil", "default"),
            Recalled::new("likes jazz", "prefs"),
            Recalled::new("  My garden\thas\n basil ", "python-memory"),
            Recalled::new("My garden has basil", "bash-memory"),
            Recalled::new("My garden has basil", "python-memory"),
        ]);
        assert_eq!(
            merged,
            [
                Recalled {
                    content: "My garden has basil".into(),
                    source: "default".into(),
                    sources: vec!["default".into(), "python-memory".into(), "bash-memory".into()],
                },
                Recalled::new("likes jazz", "prefs"),
            ]
        );
    }

    #[test]
    fn case_punctuation_and_wording_still_tell_memories_apart() {
        let merged = dedup(vec![
            Recalled::new("My garden has basil", "default"),
            Recalled::new("my garden has basil", "a"),
            Recalled::new("My garden has basil.", "b"),
            Recalled::new("note: My garden has basil", "c"),
        ]);
        assert_eq!(merged.len(), 4, "{merged:?}");
        assert!(merged.iter().all(|r| r.sources == [r.source.clone()]));
    }

    #[test]
    fn serialises_with_source_and_sources() {
        let v = serde_json::to_value(Recalled::new("x", "default")).unwrap();
        assert_eq!(v, serde_json::json!({"content": "x", "source": "default", "sources": ["default"]}));
    }
}
