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
/// existing directory is never touched.
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

pub fn exec(args: NewArgs, home: &Home) -> CliResult {
    let parent = args.dir.as_deref().unwrap_or(home.plugins_dir());
    let template = Template::from_tag(Some(&args.runtime))?;
    let request =
        ScaffoldRequest { name: &args.name, description: args.description.as_deref(), runtime: Some(&args.runtime) };
    let path = scaffold(parent, &request)?;
    let path = path.canonicalize().unwrap_or(path);
    let steps = next_steps(template, &path);
    let mut out = std::io::stdout().lock();
    if args.json {
        let report = serde_json::json!({
            "scaffolded": true,
            "name": args.name,
            "path": path,
            "runtime": template.runtime().label(),
            "template": template.tag(),
            "next_steps": steps,
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

/// Shell commands that build (if needed) and try the new plugin.
fn next_steps(template: Template, path: &Path) -> Vec<String> {
    let mut steps = vec![format!("cd {}", shell_quote(&path.to_string_lossy()))];
    steps.extend(template.build_command().map(str::to_owned));
    steps.push(
        "ctxhost hook . after_turn <<< '{\"agent_id\":\"a1\",\"messages\":[{\"role\":\"user\",\"content\":\"My cat is called Miso\"}]}'"
            .to_owned(),
    );
    steps.push("ctxhost hook . ingest <<< '{\"agent_id\":\"a1\",\"message\":\"What is my cat called?\"}'".to_owned());
    steps
}

fn shell_quote(s: &str) -> String {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"/._-+,:@".contains(&b)) {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}
