//! Scaffolding: a new plugin directory from a template, for every runtime of
//! spec section 4 plus a Rust component project (`ctxhost new`, and the HTTP
//! scaffold route).
//!
//! Owns the templates (embedded with `include_str!`, so a binary carries them
//! all) and writing them. Every template implements `after_turn` (store what
//! the user said) and `ingest` (recall the agent's 3 most recent notes) and
//! runs as generated; `plugin.toml` puts `runtime` and the execution settings
//! in `[hooks]`, where LibreFang's daemon reads them too. The Rust project
//! carries the host's `wit/ctxhost.wit` and the guest SDK of `guest-examples/sdk`
//! (both embedded from this repository, so they never drift from the host) and
//! builds anywhere with crates.io alone.
//!
//! Rule: a plugin directory appears whole or not at all. It is written into a
//! temporary directory inside the plugins dir, then renamed into place with
//! `RENAME_NOREPLACE`; an existing plugin is never touched. This module never
//! runs anything.

use std::borrow::Cow;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::manifest::{Runtime, validate_name};

/// A scaffolded plugin's name is at most this long (it names a directory,
/// a data dir and a staging dir with a prefix, within the file system's 255).
pub const MAX_NAME_LEN: usize = 64;

/// What to scaffold: the HTTP route's body (`{"name","description"?,"runtime"?}`).
#[derive(Debug, Clone, Copy, Default)]
pub struct ScaffoldRequest<'a> {
    pub name: &'a str,
    pub description: Option<&'a str>,
    /// A runtime tag of spec section 4 (aliases too), or `rust`; default python.
    pub runtime: Option<&'a str>,
}

/// Why nothing was scaffolded. Nothing is left behind in any case.
#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    /// LibreFang's 409 text.
    #[error("Plugin '{0}' already exists")]
    AlreadyExists(String),
    /// The spec's text (section 1).
    #[error("Invalid plugin name '{0}': must contain only ASCII letters, digits, hyphens, and underscores")]
    InvalidName(String),
    #[error("Invalid plugin name: it is {len} characters long; at most {MAX_NAME_LEN} are allowed")]
    NameTooLong { len: usize },
    #[error("unknown runtime '{tag}'{hint} Valid runtimes: {valid}", hint = runtime_hint(tag))]
    UnknownRuntime { tag: String, valid: String },
    #[error("failed to write `{}`", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// `; did you mean `x`?` or `.`: the end of the unknown-runtime sentence.
fn runtime_hint(tag: &str) -> String {
    match crate::hint::did_you_mean(&tag.to_ascii_lowercase(), Template::ALL.iter().map(|t| t.tag())) {
        hint if hint.is_empty() => ".".to_owned(),
        hint => hint,
    }
}

/// One template per runtime. `Rust` is a component project (`runtime = "wasm"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Template {
    Python,
    Node,
    Deno,
    Go,
    Ruby,
    Bash,
    Bun,
    Php,
    Lua,
    V,
    Native,
    Rust,
}

impl Template {
    pub const ALL: [Template; 12] = [
        Template::Python,
        Template::Node,
        Template::Deno,
        Template::Go,
        Template::Ruby,
        Template::Bash,
        Template::Bun,
        Template::Php,
        Template::Lua,
        Template::V,
        Template::Native,
        Template::Rust,
    ];

    /// The template for a runtime tag: the tags and aliases of spec section 4
    /// (case-insensitive), `rust` (also `rs`), and `wasm`, which means `rust`
    /// (the component project is the one wasm template). No tag: python.
    ///
    /// # Errors
    /// [`ScaffoldError::UnknownRuntime`] for any other tag, a launcher path included.
    pub fn from_tag(tag: Option<&str>) -> Result<Template, ScaffoldError> {
        let Some(tag) = tag else { return Ok(Template::Python) };
        let unknown = || ScaffoldError::UnknownRuntime { tag: tag.to_owned(), valid: valid_runtimes() };
        if matches!(tag.trim().to_ascii_lowercase().as_str(), "rust" | "rs") {
            return Ok(Template::Rust);
        }
        match Runtime::from_tag(tag) {
            (_, Some(_)) => Err(unknown()),
            (runtime, None) => Ok(match runtime {
                Runtime::Python => Template::Python,
                Runtime::Node => Template::Node,
                Runtime::Deno => Template::Deno,
                Runtime::Go => Template::Go,
                Runtime::Ruby => Template::Ruby,
                Runtime::Bash => Template::Bash,
                Runtime::Bun => Template::Bun,
                Runtime::Php => Template::Php,
                Runtime::Lua => Template::Lua,
                Runtime::V => Template::V,
                Runtime::Native => Template::Native,
                Runtime::Wasm => Template::Rust,
                Runtime::Custom(_) => return Err(unknown()),
            }),
        }
    }

    /// The template's name, as `ctxhost new --runtime` takes it.
    pub fn tag(self) -> &'static str {
        match self {
            Template::Python => "python",
            Template::Node => "node",
            Template::Deno => "deno",
            Template::Go => "go",
            Template::Ruby => "ruby",
            Template::Bash => "bash",
            Template::Bun => "bun",
            Template::Php => "php",
            Template::Lua => "lua",
            Template::V => "v",
            Template::Native => "native",
            Template::Rust => "rust",
        }
    }

    /// The `runtime` the generated plugin.toml declares.
    pub fn runtime(self) -> Runtime {
        match self {
            Template::Python => Runtime::Python,
            Template::Node => Runtime::Node,
            Template::Deno => Runtime::Deno,
            Template::Go => Runtime::Go,
            Template::Ruby => Runtime::Ruby,
            Template::Bash => Runtime::Bash,
            Template::Bun => Runtime::Bun,
            Template::Php => Runtime::Php,
            Template::Lua => Runtime::Lua,
            Template::V => Runtime::V,
            Template::Native => Runtime::Native,
            Template::Rust => Runtime::Wasm,
        }
    }

    /// The command to run in the plugin directory before its hooks work, if any.
    pub fn build_command(self) -> Option<&'static str> {
        (self == Template::Rust).then_some("cargo build --release")
    }

    /// The programs the generated plugin needs on PATH (any one of them; none
    /// for a native hook) and the command that installs them on Debian or
    /// Ubuntu, or the runtime's own installer. The launcher table's install
    /// hint (`runner::process::launcher`) says where else to get it.
    pub fn needs_program(self) -> Option<(&'static [&'static str], &'static str)> {
        const RUSTUP: &str = "curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh";
        Some(match self {
            Template::Python => (&["python3", "python"], "sudo apt-get install python3"),
            Template::Node => (&["node"], "sudo apt-get install nodejs"),
            Template::Deno => (&["deno"], "curl -fsSL https://deno.land/install.sh | sh"),
            Template::Go => (&["go"], "sudo apt-get install golang-go"),
            Template::Ruby => (&["ruby"], "sudo apt-get install ruby"),
            Template::Bash => (&["bash"], "sudo apt-get install bash"),
            Template::Bun => (&["bun"], "curl -fsSL https://bun.sh/install | bash"),
            Template::Php => (&["php"], "sudo apt-get install php-cli"),
            Template::Lua => (&["lua", "lua5.4", "lua5.3"], "sudo apt-get install lua5.4"),
            Template::V => {
                (&["v"], "git clone --depth=1 https://github.com/vlang/v && cd v && make && sudo ./v symlink")
            }
            Template::Rust => (&["cargo"], RUSTUP),
            Template::Native => return None,
        })
    }

    /// The file to edit first.
    pub fn main_file(self) -> &'static str {
        match self.script() {
            Some(script) => script.path,
            None => "src/lib.rs",
        }
    }

    fn script(self) -> Option<&'static Script> {
        Some(match self {
            Template::Python => &PYTHON,
            Template::Node => &NODE,
            Template::Deno => &DENO,
            Template::Go => &GO,
            Template::Ruby => &RUBY,
            Template::Bash => &BASH,
            Template::Bun => &BUN,
            Template::Php => &PHP,
            Template::Lua => &LUA,
            Template::V => &V,
            Template::Native => &NATIVE,
            Template::Rust => return None,
        })
    }

    /// Every file of the plugin, paths relative to its directory.
    fn files(self, name: &str, description: &str) -> Vec<File> {
        match self.script() {
            Some(script) => script_files(self, script, name, description),
            None => rust_files(name, description),
        }
    }
}

/// The valid `--runtime` values, for error messages and help.
pub fn valid_runtimes() -> String {
    let tags: Vec<&str> = Template::ALL.iter().map(|t| t.tag()).collect();
    format!("{} (wasm = rust; aliases such as py, js, ts, golang, rb and sh work too)", tags.join(", "))
}

/// Writes `<plugins_dir>/<name>/` from the request's template and returns
/// that path. The plugins dir is created when missing.
///
/// # Errors
/// An invalid name, an unknown runtime, an existing plugin of that name, or an
/// I/O failure; in every case nothing is left behind.
pub fn scaffold(plugins_dir: &Path, request: &ScaffoldRequest<'_>) -> Result<PathBuf, ScaffoldError> {
    let name = request.name;
    validate_name(name).map_err(|_| ScaffoldError::InvalidName(name.to_owned()))?;
    if name.len() > MAX_NAME_LEN {
        return Err(ScaffoldError::NameTooLong { len: name.len() });
    }
    let template = Template::from_tag(request.runtime)?;
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| ScaffoldError::Io { path, source }
    };
    let target = plugins_dir.join(name);
    if target.symlink_metadata().is_ok() {
        return Err(ScaffoldError::AlreadyExists(name.to_owned()));
    }
    std::fs::create_dir_all(plugins_dir).map_err(io(plugins_dir))?;
    // A dot name is never a plugin name, so the temporary directory cannot be
    // mistaken for a plugin.
    let tmp =
        tempfile::Builder::new().prefix(&format!(".{name}.new-")).tempdir_in(plugins_dir).map_err(io(plugins_dir))?;
    let description = request.description.map(Cow::Borrowed).unwrap_or_else(|| {
        Cow::Owned(format!("A {} context-engine plugin: remembers what the user said", template.tag()))
    });
    let mut files = template.files(name, &description);
    // The manifest last: until it exists, nothing that looks for plugins
    // (a directory holding a plugin.toml) sees the temporary directory.
    files.sort_by_key(|f| f.path == crate::manifest::MANIFEST_FILE);
    for file in files {
        let path = tmp.path().join(file.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        std::fs::write(&path, file.content.as_bytes()).map_err(io(&path))?;
        let mode = if file.executable { 0o755 } else { 0o644 };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).map_err(io(&path))?;
    }
    // tempdir_in makes the directory 0700; a plugin dir is an ordinary one.
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).map_err(io(tmp.path()))?;
    match crate::home::rename_noreplace(tmp.path(), &target) {
        Ok(()) => {
            // The directory now lives at `target`; nothing is left to clean up.
            let _ = tmp.keep();
            Ok(target)
        }
        Err(e) if matches!(e.raw_os_error(), Some(libc::EEXIST | libc::ENOTEMPTY)) => {
            Err(ScaffoldError::AlreadyExists(name.to_owned()))
        }
        Err(source) => Err(ScaffoldError::Io { path: target, source }),
    }
}

/// One generated file.
struct File {
    path: &'static str,
    content: Cow<'static, str>,
    executable: bool,
}

impl File {
    fn new(path: &'static str, content: impl Into<Cow<'static, str>>) -> File {
        File { path, content: content.into(), executable: false }
    }
}

/// A script template: one script serving `ingest` and `after_turn`.
struct Script {
    /// Where the script goes, relative to the plugin dir.
    path: &'static str,
    source: &'static str,
    /// Files shipped next to it (path, content).
    extra: &'static [(&'static str, &'static str)],
    executable: bool,
    /// README: what must be installed.
    needs: &'static str,
    /// README: what is special about this runtime, if anything.
    note: &'static str,
}

const PYTHON: Script = Script {
    path: "hooks/memory.py",
    source: include_str!("templates/python/memory.py"),
    extra: &[],
    executable: false,
    needs: "Python 3 (`python3`) on PATH; standard library only",
    note: "",
};
const NODE: Script = Script {
    path: "hooks/memory.js",
    source: include_str!("templates/node/memory.js"),
    extra: &[],
    executable: false,
    needs: "Node.js (`node`) on PATH; no npm packages",
    note: "",
};
const DENO: Script = Script {
    path: "hooks/memory.ts",
    source: include_str!("templates/deno/memory.ts"),
    extra: &[],
    executable: false,
    needs: "Deno (`deno`) on PATH",
    note: "Hooks run as `deno run --allow-read --allow-env hooks/memory.ts`: no write permission, \
           so this template keeps its notes in `localStorage`, which Deno persists per script under \
           `DENO_DIR` (default `~/.cache/deno`).",
};
const BUN: Script = Script {
    path: "hooks/memory.ts",
    source: include_str!("templates/bun/memory.ts"),
    extra: &[],
    executable: false,
    needs: "Bun (`bun`) on PATH",
    note: "",
};
const GO: Script = Script {
    path: "hooks/memory.go",
    source: include_str!("templates/go/memory.go"),
    extra: &[],
    executable: false,
    needs: "Go (`go`) on PATH; standard library only, no go.mod",
    note: "Hooks run as `go run hooks/memory.go`, which compiles on every call (Go caches the build). \
           For speed, `go build -o hooks/memory hooks/memory.go` and switch `runtime` to `native` with \
           the hooks pointing at `hooks/memory`.",
};
const RUBY: Script = Script {
    path: "hooks/memory.rb",
    source: include_str!("templates/ruby/memory.rb"),
    extra: &[],
    executable: false,
    needs: "Ruby >= 3.0 (`ruby`) on PATH; standard library only",
    note: "",
};
const BASH: Script = Script {
    path: "hooks/memory.sh",
    source: include_str!("templates/bash/memory.sh"),
    extra: &[],
    executable: false,
    needs: "bash, grep, sed and tac (coreutils)",
    note: "Bash has no JSON parser: the script pulls JSON string literals out of the request with \
           grep and stores them still escaped. It sees user messages whose content is a plain string \
           (how ctxhost and LibreFang send text). For more, use `jq`.",
};
const PHP: Script = Script {
    path: "hooks/memory.php",
    source: include_str!("templates/php/memory.php"),
    extra: &[],
    executable: false,
    needs: "PHP CLI (`php`) on PATH",
    note: "",
};
const LUA: Script = Script {
    path: "hooks/memory.lua",
    source: include_str!("templates/lua/memory.lua"),
    extra: &[("hooks/json.lua", include_str!("../../guest-examples/lua-memory/hooks/json.lua"))],
    executable: false,
    needs: "Lua 5.3 or 5.4 (`lua`) on PATH",
    note: "Lua has no JSON in its standard library: `hooks/json.lua` (a small strict decoder and \
           encoder) ships next to the hook.",
};
const V: Script = Script {
    path: "hooks/memory.v",
    source: include_str!("templates/v/memory.v"),
    extra: &[],
    executable: false,
    needs: "V (`v`) on PATH: https://vlang.io/#install",
    note: "Hooks run as `v -no-retry-compilation run hooks/memory.v`. This template reads messages \
           whose content is a plain string (how ctxhost and LibreFang send text).",
};
const NATIVE: Script = Script {
    path: "hooks/memory",
    source: include_str!("templates/bash/memory.sh"),
    extra: &[],
    executable: true,
    needs: "nothing but the executable itself (this one is a bash script: bash, grep, sed, tac)",
    note: "A native hook is any executable: the host runs it directly (cwd = this directory). \
           `hooks/memory` is a bash script with a shebang, mode 0755, so it runs as generated; \
           replace it with your compiled binary (same stdin/stdout contract) and keep it executable.",
};

/// plugin.toml, README.md and the script(s) of a script template.
fn script_files(template: Template, script: &'static Script, name: &str, description: &str) -> Vec<File> {
    let runtime = template.runtime().label();
    let manifest = format!(
        "\
# Scaffolded by `ctxhost new`; README.md says how to try it.
name = \"{name}\"
version = \"0.1.0\"
description = {description}

[hooks]
# Execution settings (runtime, timeouts, failure policy, retries, …) go here, in
# [hooks], where both ctxhost and LibreFang's daemon read them.
runtime = \"{runtime}\"
hook_timeout_secs = 30
on_hook_failure = \"warn\"   # warn: log, then the built-in behaviour; skip: silently; abort: fail the call
# Hook scripts, relative to this directory. One script serves both hooks: it
# dispatches on the request's \"type\". Add assemble, compact, bootstrap,
# transform_tool_result, … the same way.
ingest = \"{path}\"
after_turn = \"{path}\"
",
        description = toml_string(description),
        path = script.path,
    );
    let mut files = vec![
        File::new("plugin.toml", manifest),
        File::new("README.md", script_readme(template, script, name, description)),
        File::new(".gitignore", "data/\n"),
        File { path: script.path, content: Cow::Borrowed(script.source), executable: script.executable },
    ];
    files.extend(script.extra.iter().map(|(path, content)| File::new(path, *content)));
    files
}

const TRY_IT: &str = "\
```sh
ctxhost hook . after_turn <<< '{\"agent_id\":\"a1\",\"messages\":[{\"role\":\"user\",\"content\":\"My cat is called Miso\"}]}'
ctxhost hook . ingest <<< '{\"agent_id\":\"a1\",\"message\":\"What is my cat called?\"}'
```";

fn script_readme(template: Template, script: &Script, name: &str, description: &str) -> String {
    let runtime = template.tag();
    let storage = if template == Template::Deno { "in `localStorage`" } else { "in `data/notes.jsonl`" };
    let note = if script.note.is_empty() { String::new() } else { format!("\n{}\n", script.note) };
    format!(
        "\
# {name}

{description}

A {runtime} context-engine plugin for ctxhost (and LibreFang: same protocol), scaffolded
by `ctxhost new`. Needs: {needs}.

- `plugin.toml`: name, version, and in `[hooks]` the runtime, the execution settings and
  the hook scripts.
- `{script}`: both hooks. `after_turn` stores the text of every user message of the turn
  {storage}; `ingest` recalls the 3 most recent notes of the same agent, newest first.
{note}
## Try it

From this directory (`ctxhost doctor` says whether the runtime is installed):

{TRY_IT}

The second command prints an `ingest_result` whose `memories` hold `My cat is called Miso`.
(With a ctxhost home other than `~/.ctxhost`, put `--home DIR` before `hook`.)

## How a hook is called

One process per call, in this directory: the host writes one JSON request line on stdin
and reads the reply from the last JSON line on stdout; stderr is for logs. The request's
`type` names the hook, so one script serves both:

- `after_turn`, after each turn, with the turn's messages (`content` is a string, or a
  list of blocks such as `{{\"type\":\"text\",\"text\":\"…\"}}`):
  `{{\"type\":\"after_turn\",\"agent_id\":\"a1\",\"messages\":[{{\"role\":\"user\",\"content\":\"My cat is called Miso\"}}]}}`
  → `{{\"type\":\"ok\"}}`. Memories in the reply (`\"memories\":[{{\"content\":\"…\"}}]`) are stored
  by the host's memory under this plugin's name.
- `ingest`, when a user message arrives, before the model is called; the memories it
  returns are recalled into the prompt:
  `{{\"type\":\"ingest\",\"agent_id\":\"a1\",\"message\":\"What is my cat called?\",\"peer_id\":null}}`
  → `{{\"type\":\"ingest_result\",\"memories\":[{{\"content\":\"My cat is called Miso\"}}]}}`.

`ctxhost hook` warns about a request field the hook does not have. Every hook's request
and reply (assemble, compact, bootstrap, transform_tool_result, …) is described in
`docs/reference/hooks.md` in the ctxhost repository, and `docs/guides/script.md` there is
the guide to script plugins.

## Use it

Keep the directory in the plugins dir (`ctxhost new` puts it there unless given `--dir`;
the directory name is the plugin's name) and name it in `config.toml`:

```toml
[context_engine]
plugin = \"{name}\"
```
",
        needs = script.needs,
        script = script.path,
    )
}

/// The Rust component project.
fn rust_files(name: &str, description: &str) -> Vec<File> {
    let krate = crate_name(name);
    let wasm = format!("target/wasm32-wasip2/release/{}.wasm", krate.replace('-', "_"));
    let manifest = format!(
        "\
# Scaffolded by `ctxhost new`; README.md says how to build and try it.
name = \"{name}\"
version = \"0.1.0\"
description = {description}
# The component `cargo build --release` writes.
component = \"{wasm}\"

[hooks]
# Execution settings go here, in [hooks]. A component names its hooks itself
# (`HOOKS` in src/lib.rs), so there are no hook paths.
runtime = \"wasm\"
hook_timeout_secs = 30
on_hook_failure = \"warn\"   # warn: log, then the built-in behaviour; skip: silently; abort: fail the call

# Limits and grants (these are the defaults; no directory is visible by default):
# [sandbox]
# fuel = 1_000_000_000        # per call
# memory_mb = 64
# dirs = [{{ host = \"state\", guest = \"/data\", mode = \"rw\" }}]   # relative to this directory
",
        description = toml_string(description),
    );
    let cargo = format!(
        "\
[package]
name = \"{krate}\"
version = \"0.1.0\"
edition = \"2024\"
description = {description}
publish = false

[lib]
crate-type = [\"cdylib\"]

[dependencies]
ctxhost-sdk = {{ path = \"sdk\" }}

# A workspace of its own (with the SDK), so it builds wherever it is.
[workspace]
resolver = \"3\"
members = [\"sdk\"]

[workspace.package]
edition = \"2024\"
version = \"0.1.0\"
license = \"MIT OR Apache-2.0\"

[profile.release]
opt-level = 3
lto = true
codegen-units = 1
strip = true
",
        description = toml_string(description),
    );
    let cargo_config = format!(
        "{}\n# `cargo build` builds the component.\n[build]\ntarget = \"wasm32-wasip2\"\n",
        include_str!("../../guest-examples/.cargo/config.toml").trim_end()
    );
    vec![
        File::new("plugin.toml", manifest),
        File::new("README.md", rust_readme(name, description, &wasm)),
        File::new(".gitignore", "target/\n"),
        File::new("Cargo.toml", cargo),
        // The versions ctxhost's own guest examples are built and tested with;
        // cargo drops the entries this project does not use.
        File::new("Cargo.lock", include_str!("../../guest-examples/Cargo.lock")),
        File::new(".cargo/config.toml", cargo_config),
        File::new("rust-toolchain.toml", include_str!("../../rust-toolchain.toml")),
        File::new("src/lib.rs", include_str!("templates/rust/lib.rs").replace("{{name}}", name)),
        File::new("wit/ctxhost.wit", WIT),
        File::new("sdk/Cargo.toml", include_str!("../../guest-examples/sdk/Cargo.toml")),
        File::new("sdk/src/lib.rs", sdk_source()),
    ]
}

/// The host's interface, as the component is built against it.
const WIT: &str = include_str!("../../wit/ctxhost.wit");
const SDK_WIT_PATH: &str = "path: \"../../wit\"";

/// The guest SDK, reading the WIT from the project's `wit/` instead of the repository's.
fn sdk_source() -> String {
    include_str!("../../guest-examples/sdk/src/lib.rs").replace(SDK_WIT_PATH, "path: \"../wit\"")
}

fn rust_readme(name: &str, description: &str, wasm: &str) -> String {
    format!(
        "\
# {name}

{description}

A Rust component plugin for ctxhost, scaffolded by `ctxhost new`: it runs in-process,
sandboxed (fresh instance, fuel, deadline and memory cap per call; no files, network or
environment unless `[sandbox]` grants them).

- `src/lib.rs`: the hooks. `after_turn` stores the text of every user message of the
  turn in the plugin's host storage (`<ctxhost home>/data/{name}/`); `ingest` recalls the
  3 most recent notes of the same agent, newest first.
- `plugin.toml`: `component` points at the built `.wasm`; `[hooks]` holds the execution
  settings.
- `sdk/` is ctxhost's guest SDK (the `Plugin` trait: implement only the hooks you need)
  and `wit/ctxhost.wit` the host's interface (`ctxhost:plugin@0.1.0`), copied here so the
  project builds anywhere with crates.io alone. The host refuses a component built
  against another version of the interface.

## Build

Needs Rust with the `wasm32-wasip2` target (`rust-toolchain.toml` asks rustup for it;
otherwise `rustup target add wasm32-wasip2`):

```sh
cargo build --release
```

This writes `{wasm}`, the file `component` names.

## Try it

From this directory:

{TRY_IT}

The second command prints the recalled note, `My cat is called Miso`.
(With a ctxhost home other than `~/.ctxhost`, put `--home DIR` before `hook`.)

The requests and replies are the script plugins' JSON (`after_turn` gets the turn's
messages, `ingest` the user's message and answers `memories`), typed for you by the SDK.
`docs/guides/component.md` in the ctxhost repository is the guide to component plugins,
and `docs/reference/hooks.md` there describes every hook's request and reply.

## Use it

Keep the directory in the plugins dir (the directory name is the plugin's name) and name
it in `config.toml`:

```toml
[context_engine]
plugin = \"{name}\"
```
"
    )
}

/// A cargo package name for a plugin name: the same, unless cargo would refuse it.
fn crate_name(name: &str) -> String {
    // Rust keywords and the names of the built-in crates.
    const RESERVED: &str = "abstract alloc as async await become box break const continue core crate do dyn else \
        enum extern false final fn for gen if impl in let loop macro match mod move mut override priv proc_macro pub \
        ref return self static std struct super test trait true try type typeof unsafe unsized use virtual where \
        while yield";
    let lower = name.to_ascii_lowercase();
    if name.starts_with(|c: char| c.is_ascii_digit()) || RESERVED.split_whitespace().any(|w| w == lower) {
        format!("plugin-{name}")
    } else {
        name.to_owned()
    }
}

/// `s` as a TOML basic string, quotes and escapes included.
fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sdk_copy_reads_the_projects_wit() {
        assert!(include_str!("../../guest-examples/sdk/src/lib.rs").contains(SDK_WIT_PATH));
        assert!(sdk_source().contains("path: \"../wit\""));
    }

    #[test]
    fn tags_aliases_and_unknown() {
        assert_eq!(Template::from_tag(None).unwrap(), Template::Python);
        assert_eq!(Template::from_tag(Some("TypeScript")).unwrap(), Template::Deno);
        assert_eq!(Template::from_tag(Some("wasm")).unwrap(), Template::Rust);
        assert_eq!(Template::from_tag(Some("Rust")).unwrap(), Template::Rust);
        assert_eq!(Template::from_tag(Some("exec")).unwrap(), Template::Native);
        for bad in ["pyhton", "/usr/bin/python3", "rustc"] {
            let err = Template::from_tag(Some(bad)).unwrap_err();
            assert!(matches!(err, ScaffoldError::UnknownRuntime { .. }), "{bad}: {err}");
        }
        let err = Template::from_tag(Some("pyhton")).unwrap_err().to_string();
        assert!(
            err.starts_with("unknown runtime 'pyhton'; did you mean `python`? Valid runtimes: python, node,"),
            "{err}"
        );
    }

    #[test]
    fn crate_names_cargo_accepts() {
        assert_eq!(crate_name("my-notes"), "my-notes");
        assert_eq!(crate_name("2fast"), "plugin-2fast");
        assert_eq!(crate_name("Test"), "plugin-Test");
    }

    #[test]
    fn descriptions_are_escaped_in_toml() {
        let files = Template::Python.files("p", "say \"hi\"\nand leave");
        let manifest: toml::Table = toml::from_str(&files[0].content).unwrap();
        assert_eq!(manifest["description"].as_str(), Some("say \"hi\"\nand leave"));
    }
}
