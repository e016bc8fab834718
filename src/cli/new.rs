//! `ctxhost new <NAME>`: scaffold a plugin (see `crate::scaffold`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use super::CliResult;
use crate::home::Home;
use crate::scaffold::{ScaffoldRequest, Template, scaffold};

/// Create a new plugin from a template that works as generated.
///
/// Writes `<DIR>/<NAME>/` with a `plugin.toml` (runtime and execution settings
/// in `[hooks]`), a README and a hook script implementing `after_turn` (store
/// what the user said) and `ingest` (recall the agent's 3 latest notes). An
/// existing directory is never touched. The next steps it prints keep the
/// `--home` and `--config` given; when the runtime is not on PATH it warns
/// and names the command that installs it.
///
/// Runtimes: python (default), node, deno, go, ruby, bash, bun, php, lua, v,
/// native (an executable script with a shebang, mode 0755; replace it with your
/// binary), and rust: a self-contained Rust component project (runtime "wasm":
/// it carries ctxhost's WIT and guest SDK; `cargo build --release` builds the
/// component its plugin.toml points at). `--runtime wasm` means rust. The
/// aliases of the runtime table work too (py, js, ts, golang, rb, sh, exec, …).
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  ctxhost new my-notes                        # python, in the plugins dir
  ctxhost new my-notes --runtime node --description 'Remembers what the user said'
  ctxhost new shout --runtime rust --dir . && cd shout && cargo build --release
  ctxhost new my-notes --runtime go --json")]
pub struct NewArgs {
    /// The plugin's name (its directory name): ASCII letters, digits, `-` and `_`
    name: String,
    /// The template: python, node, deno, go, ruby, bash, bun, php, lua, v, native, rust (= wasm)
    #[arg(long, short, value_name = "TAG", default_value = "python")]
    runtime: String,
    /// The description written to plugin.toml and the README
    #[arg(long, value_name = "TEXT")]
    description: Option<String>,
    /// Where to create the plugin directory [default: the plugins dir]
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Print `{"scaffolded":true,"name","path","runtime","template","next_steps":[…]}`
    #[arg(long)]
    json: bool,
}

/// The global flags that locate a home, as the user gave them.
pub(super) struct Given {
    pub home: Option<PathBuf>,
    pub config: Option<PathBuf>,
}

/// `--home DIR` and `--config FILE` as the user gave them, made absolute
/// (the next steps start with a `cd`), each quoted for a shell.
fn home_flags(given: &Given) -> Vec<String> {
    let mut flags = Vec::new();
    for (flag, path) in [("--home", &given.home), ("--config", &given.config)] {
        if let Some(path) = path {
            let path = path.canonicalize().or_else(|_| std::path::absolute(path)).unwrap_or_else(|_| path.to_owned());
            flags.push(format!("{flag} {}", shell_quote(&path.to_string_lossy())));
        }
    }
    flags
}

/// The runtime the template needs, when none of its programs is on PATH:
/// (what is missing, the command that installs it).
fn missing_runtime(template: Template) -> Option<(String, String)> {
    let (programs, install) = template.needs_program()?;
    let path = std::env::var_os("PATH");
    if programs.iter().any(|p| crate::runner::process::find_on_path(p, path.as_deref()).is_some()) {
        return None;
    }
    let hint = crate::runner::process::launcher::info(&template.runtime()).install_hint;
    let what = programs.iter().map(|p| format!("`{p}`")).collect::<Vec<_>>().join(" or ");
    let hint = if template == Template::Rust {
        "Install Rust with rustup (https://rustup.rs); rust-toolchain.toml adds the wasm32-wasip2 target"
    } else {
        hint
    };
    Some((format!("{what} is not on PATH, so this plugin's hooks cannot run yet. {hint}"), install.to_owned()))
}

pub(super) fn exec(args: NewArgs, home: &Home, given: &Given) -> CliResult {
    let parent = args.dir.as_deref().unwrap_or(home.plugins_dir());
    let template = Template::from_tag(Some(&args.runtime))?;
    let request =
        ScaffoldRequest { name: &args.name, description: args.description.as_deref(), runtime: Some(&args.runtime) };
    let path = scaffold(parent, &request)?;
    let path = path.canonicalize().unwrap_or(path);
    let missing = missing_runtime(template);
    // After the scaffold, which may have made the home: its real path.
    let mut steps = next_steps(template, &path, &home_flags(given));
    if let Some((problem, install)) = &missing {
        tracing::warn!("{problem}. Install it with: {install}");
        steps.insert(0, install.clone());
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        let report = serde_json::json!({
            "scaffolded": true,
            "name": args.name,
            "path": path,
            "runtime": template.runtime().label(),
            "template": template.tag(),
            "next_steps": steps,
            "warnings": missing.iter().map(|(problem, install)| format!("{problem}. Install it with: {install}")).collect::<Vec<_>>(),
        });
        serde_json::to_writer(&mut out, &report)?;
        writeln!(out)?;
    } else {
        writeln!(out, "Created {} plugin `{}` in {}", template.tag(), args.name, path.display())?;
        writeln!(out, "\nNext steps:")?;
        for step in &steps {
            writeln!(out, "  {step}")?;
        }
        writeln!(out, "\nThen edit {} (README.md has the details).", template.main_file())?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// Shell commands that build (if needed) and try the new plugin, with the
/// flags that find the user's home (`--home`, `--config`).
fn next_steps(template: Template, path: &Path, home_flags: &[String]) -> Vec<String> {
    let mut steps = vec![format!("cd {}", shell_quote(&path.to_string_lossy()))];
    steps.extend(template.build_command().map(str::to_owned));
    let ctxhost = std::iter::once("ctxhost").chain(home_flags.iter().map(String::as_str)).collect::<Vec<_>>().join(" ");
    steps.push(format!(
        "{ctxhost} hook . after_turn <<< '{{\"agent_id\":\"a1\",\"messages\":[{{\"role\":\"user\",\"content\":\"My cat is called Miso\"}}]}}'"
    ));
    steps.push(format!("{ctxhost} hook . ingest <<< '{{\"agent_id\":\"a1\",\"message\":\"What is my cat called?\"}}'"));
    steps
}

fn shell_quote(s: &str) -> String {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"/._-+,:@".contains(&b)) {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}
