//! The module layers of `src/` only point down (ARCHITECTURE.md, "Layers").
//!
//! The graph is read from the source: an edge `a → b` for every `crate::b`
//! path in a file of top-level module `a` (doc comments and `//` comments
//! left out, `use crate::{b, …}` groups included). Each top-level module has
//! a layer below; an edge must go to a strictly lower layer. A module added
//! to `src/` without a layer fails the test until it gets one.
//!
//! Print the graph: `cargo test --test integration layers::print_module_graph -- --ignored --nocapture`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, lowest first. An edge may only go to an earlier row.
const LAYERS: &[&[&str]] = &[
    &["protocol", "hint", "home"],
    &["metrics", "manifest", "config"],
    &["host"],
    &["runner"],
    &["faust"],
    &["plugin"],
    &["engine", "agent"],
    &["app", "session", "scaffold"],
    &["server", "sidecar"],
    &["cli"],
];

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of `src/` belongs to (`None` for the crate
/// roots `lib.rs` and `main.rs`).
fn top_module(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel.components().next()?.as_os_str().to_string_lossy().into_owned();
    let name = first.strip_suffix(".rs").unwrap_or(&first).to_owned();
    (name != "lib" && name != "main").then_some(name)
}

/// The top-level modules `code` names through `crate::`.
fn crate_refs(code: &str) -> BTreeSet<String> {
    let mut refs = BTreeSet::new();
    let code: String = code
        .lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let ident = |s: &str| s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>();
    let mut rest = code.as_str();
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level names of the group: items at nesting depth 0, up to
            // the group's own closing brace.
            let mut depth = 0;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        let name = ident(item.trim());
                        if !name.is_empty() && name != "self" {
                            refs.insert(name);
                        }
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        let name = ident(item.trim());
                        if !name.is_empty() && name != "self" {
                            refs.insert(name);
                        }
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                if depth == 0 {
                    item.push(c);
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                refs.insert(name);
            }
        }
    }
    refs
}

/// `module → modules it uses`, for every top-level module of `src/`.
fn module_graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = src_dir();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let Some(module) = top_module(&src, file) else { continue };
        let code = std::fs::read_to_string(file).unwrap();
        let edges = graph.entry(module.clone()).or_default();
        edges.extend(crate_refs(&code).into_iter().filter(|m| *m != module));
    }
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for edges in graph.values_mut() {
        edges.retain(|m| modules.contains(m));
    }
    graph
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|row| row.contains(&module))
}

#[test]
fn every_module_has_a_layer_and_every_edge_points_down() {
    let graph = module_graph();
    assert!(graph.len() >= 15, "the graph reader found too few modules: {graph:?}");
    let mut problems = Vec::new();
    for (module, edges) in &graph {
        let Some(from) = layer_of(module) else {
            problems
                .push(format!("`src/{module}` has no layer: add it to LAYERS in tests/layers.rs and ARCHITECTURE.md"));
            continue;
        };
        for to in edges {
            match layer_of(to) {
                Some(layer) if layer < from => {}
                Some(_) => problems.push(format!("`{module}` (layer {from}) uses `{to}`, which is not below it")),
                None => {}
            }
        }
    }
    assert!(problems.is_empty(), "the layers are broken:\n  {}", problems.join("\n  "));
}

#[test]
fn the_graph_reader_sees_paths_groups_and_skips_comments() {
    let code = "use crate::{agent::engine::X, host::{self, vfs}, self};\n\
                // crate::cli in a comment\n\
                /// crate::server in a doc\n\
                let x = crate::runner::Runner::call;\n";
    let refs: Vec<String> = crate_refs(code).into_iter().collect();
    assert_eq!(refs, ["agent", "host", "runner"]);
}

/// Prints the module graph and its layers (the command in the module doc).
#[test]
#[ignore = "prints the graph; run with --ignored --nocapture"]
fn print_module_graph() {
    let graph = module_graph();
    for (i, row) in LAYERS.iter().enumerate().rev() {
        for module in *row {
            let edges = graph.get(*module).map(|e| e.iter().cloned().collect::<Vec<_>>().join(" ")).unwrap_or_default();
            println!("{i} {module:<9} -> {edges}");
        }
    }
}
