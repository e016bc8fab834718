//! Runtime tags: which launcher runs a plugin's hook scripts (spec section 4).
//!
//! This module only names runtimes and parses tags; how each one is launched
//! (commands, passthrough variables, version probes) is `runner::process::launcher`.

use std::fmt;
use std::path::PathBuf;

/// A launcher kind, parsed from the manifest's `runtime` tag.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Runtime {
    Python,
    Native,
    V,
    Node,
    Deno,
    Go,
    Ruby,
    Bash,
    Bun,
    Php,
    Lua,
    Wasm,
    /// A tag containing `/` or `\`: a launcher path, run as `<path> <script>`,
    /// kept as written (it is `LIBREFANG_RUNTIME`); a relative path is taken
    /// from the plugin directory when the launcher is resolved.
    Custom(PathBuf),
}

impl Runtime {
    /// The built-in runtimes in LibreFang's order (the doctor lists them so).
    pub const BUILT_IN: [Runtime; 12] = [
        Runtime::Python,
        Runtime::Native,
        Runtime::V,
        Runtime::Node,
        Runtime::Deno,
        Runtime::Go,
        Runtime::Ruby,
        Runtime::Bash,
        Runtime::Bun,
        Runtime::Php,
        Runtime::Lua,
        Runtime::Wasm,
    ];

    /// The canonical tag (`LIBREFANG_RUNTIME`), or the launcher path for a custom runtime.
    pub fn label(&self) -> String {
        match self {
            Runtime::Custom(path) => path.display().to_string(),
            other => other.builtin_label().to_owned(),
        }
    }

    fn builtin_label(&self) -> &'static str {
        match self {
            Runtime::Python => "python",
            Runtime::Native => "native",
            Runtime::V => "v",
            Runtime::Node => "node",
            Runtime::Deno => "deno",
            Runtime::Go => "go",
            Runtime::Ruby => "ruby",
            Runtime::Bash => "bash",
            Runtime::Bun => "bun",
            Runtime::Php => "php",
            Runtime::Lua => "lua",
            Runtime::Wasm => "wasm",
            Runtime::Custom(_) => "custom",
        }
    }

    /// Parses a tag, case-insensitively, with the aliases of spec section 4.
    /// An unknown tag falls back to python; the second value is then the
    /// warning to show (it lists the valid tags).
    pub fn from_tag(tag: &str) -> (Runtime, Option<String>) {
        if tag.contains('/') || tag.contains('\\') {
            return (Runtime::Custom(PathBuf::from(tag)), None);
        }
        let runtime = match tag.trim().to_ascii_lowercase().as_str() {
            "" | "python" | "python3" | "py" => Runtime::Python,
            "native" | "binary" | "exec" => Runtime::Native,
            "v" | "vlang" => Runtime::V,
            "node" | "nodejs" | "js" => Runtime::Node,
            "deno" | "ts" | "typescript" => Runtime::Deno,
            "go" | "golang" => Runtime::Go,
            "ruby" | "rb" => Runtime::Ruby,
            "bash" | "sh" | "shell" => Runtime::Bash,
            "bun" => Runtime::Bun,
            "php" => Runtime::Php,
            "lua" => Runtime::Lua,
            "wasm" | "webassembly" => Runtime::Wasm,
            other => {
                let valid: Vec<&str> = Runtime::BUILT_IN.iter().map(Runtime::builtin_label).collect();
                let hint = crate::hint::did_you_mean(other, valid.iter().copied());
                let warning = format!(
                    "Unknown plugin runtime '{tag}', falling back to 'python'{hint}. Valid values: {}. \
                     To use a custom launcher binary, provide its full path (e.g. /usr/bin/python3).",
                    valid.join(", ")
                );
                return (Runtime::Python, Some(warning));
            }
        };
        (runtime, None)
    }
}

impl fmt::Display for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_and_case() {
        for (tag, want) in [
            ("python3", Runtime::Python),
            ("PY", Runtime::Python),
            ("binary", Runtime::Native),
            ("exec", Runtime::Native),
            ("NodeJS", Runtime::Node),
            ("js", Runtime::Node),
            ("typescript", Runtime::Deno),
            ("golang", Runtime::Go),
            ("rb", Runtime::Ruby),
            ("sh", Runtime::Bash),
            ("shell", Runtime::Bash),
            ("vlang", Runtime::V),
            ("webassembly", Runtime::Wasm),
            ("lua", Runtime::Lua),
            ("php", Runtime::Php),
            ("bun", Runtime::Bun),
        ] {
            assert_eq!(Runtime::from_tag(tag), (want, None), "{tag}");
        }
    }

    #[test]
    fn custom_paths_keep_their_case() {
        assert_eq!(Runtime::from_tag("/opt/My/python").0, Runtime::Custom("/opt/My/python".into()));
        assert_eq!(Runtime::from_tag("venv\\python.exe").0, Runtime::Custom("venv\\python.exe".into()));
    }

    #[test]
    fn unknown_tag_falls_back_with_a_warning() {
        let (rt, warning) = Runtime::from_tag("pyhton");
        assert_eq!(rt, Runtime::Python);
        let warning = warning.unwrap();
        assert!(
            warning.starts_with("Unknown plugin runtime 'pyhton', falling back to 'python'; did you mean `python`?")
        );
        assert!(warning.contains("Valid values: python, native, v, node, deno, go, ruby, bash, bun, php, lua, wasm."));
    }
}
