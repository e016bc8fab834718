//! Embeds the FaustBot compatibility shim (`src/faust/shim/`, Python) into
//! the binary: every file but the shim's own tests, as `(relative path,
//! contents)`, so `ctxhost` can write the package out at run time without
//! pip or a checkout.

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
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/faust/shim");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut files = Vec::new();
    collect(&root, &mut files);
    let mut code = String::from(
        "/// The shim's files: (path relative to the shim dir, contents).\npub const FILES: &[(&str, &str)] = &[\n",
    );
    for file in &files {
        let rel = file.strip_prefix(&root).unwrap_or(file).to_string_lossy().replace('\\', "/");
        code.push_str(&format!("    ({rel:?}, include_str!({:?})),\n", file.display().to_string()));
    }
    code.push_str("];\n");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap_or_else(|_| ".".into())).join("faust_shim.rs");
    if let Err(e) = std::fs::write(&out, code) {
        panic!("cannot write {}: {e}", out.display());
    }
}
