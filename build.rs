//! Embeds the FaustBot compatibility shim (`src/faust/shim/`, Python) into
//! the binary: every file but the shim's own tests, as `(relative path,
//! contents)`, so `ctxhost` can write the package out at run time without
//! pip or a checkout. The shim's JSON-RPC client is not copied into
//! `src/faust/shim/`: it is `guest-examples/rpc-clients/ctxhost_rpc.py`, the
//! one copy, embedded here as `ctxhost_rpc.py` at the shim's root.

use std::path::{Path, PathBuf};

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<PathBuf> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if name == "__pycache__" || name == "tests" || name.starts_with('.') {
            continue;
        }
        if path.is_dir() {
            collect(&path, out);
        } else if name.ends_with(".py") {
            out.push(path);
        }
    }
}

fn main() {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = manifest_dir.join("src/faust/shim");
    let rpc_client = manifest_dir.join("guest-examples/rpc-clients/ctxhost_rpc.py");
    println!("cargo:rerun-if-changed={}", root.display());
    println!("cargo:rerun-if-changed={}", rpc_client.display());
    let mut files = Vec::new();
    collect(&root, &mut files);
    let mut entries: Vec<(String, &Path)> = files
        .iter()
        .map(|file| (file.strip_prefix(&root).unwrap_or(file).to_string_lossy().replace('\\', "/"), file.as_path()))
        .collect();
    entries.push(("ctxhost_rpc.py".to_owned(), &rpc_client));
    let mut code = String::from(
        "/// The shim's files: (path relative to the shim dir, contents).\npub const FILES: &[(&str, &str)] = &[\n",
    );
    for (rel, file) in &entries {
        code.push_str(&format!("    ({rel:?}, include_str!({:?})),\n", file.display().to_string()));
    }
    code.push_str("];\n");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap_or_else(|_| ".".into())).join("faust_shim.rs");
    if let Err(e) = std::fs::write(&out, code) {
        panic!("cannot write {}: {e}", out.display());
    }
}
