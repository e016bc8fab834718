//! Whether a FaustBot plugin's module imports: the check `doctor` and
//! `plugin list` make so that a syntax error or a failing import is an
//! error there too, not only once `serve` starts the plugin.
//!
//! The module is imported exactly as the plugin's worker would import it —
//! the same python (its virtual environment's when it has one), the same
//! environment, the shim and the plugin dir on `sys.path`, the same sandbox
//! and hook uid — but by a short-lived one-shot process that only imports
//! and answers with the traceback's last line; nothing of the plugin's is
//! called (no `get_plugin()`, no startup). Bounded by [`TIMEOUT_SECS`].
//!
//! Must never run the module unconfined or wait on it unbounded.

use std::path::Path;

use serde_json::Value;

use crate::host::LoadContext;
use crate::manifest::WorkerProtocol;
use crate::protocol::{AgentRequest, HookName, HookRequest};
use crate::runner::process::ProcessRunner;
use crate::runner::{CallOptions, HookError, Runner};

/// How long the import may take.
pub const TIMEOUT_SECS: u64 = 10;

/// The importer: `python -I -c IMPORTER <shim dir> <entry>`, cwd the plugin
/// dir, the request on stdin (read and ignored). Prints one JSON line on the
/// real stdout: `{"ok":true}` or `{"error":"<last traceback line>","import_error":bool}`;
/// the module's own prints go to stderr.
const IMPORTER: &str = r#"
import json, os, sys, traceback
out = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
sys.stdout = sys.stderr
sys.dont_write_bytecode = True
try:
    sys.stdin.buffer.read()
except Exception:
    pass
shim, entry = sys.argv[1], os.path.abspath(sys.argv[2])
cwd = os.path.realpath(os.getcwd())
plugin_dir = cwd if os.path.realpath(entry).startswith(cwd + os.sep) else os.path.dirname(entry)
sys.path.insert(0, shim)
sys.path.insert(1, plugin_dir)
name = "faust_plugin_%s" % (os.environ.get("CTXHOST_FAUST_PLUGIN_ID") or "plugin")
answer = {"ok": True}
try:
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, entry)
    if spec is None or spec.loader is None:
        raise ImportError("cannot import %s" % entry)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    if not (callable(getattr(module, "get_plugin", None)) or hasattr(module, "Plugin")):
        answer = {"error": "PluginLoadError: Plugin module must expose get_plugin() or Plugin class"}
except BaseException as e:
    traceback.print_exc()
    last = traceback.format_exception_only(type(e), e)[-1].strip()
    if isinstance(e, SyntaxError) and e.filename and e.lineno and "line %d" % e.lineno not in last:
        last += " (%s, line %d)" % (os.path.basename(e.filename), e.lineno)
    answer = {"error": last, "import_error": isinstance(e, ImportError)}
out.write(json.dumps(answer) + "\n")
out.flush()
sys.stderr.flush()
os._exit(0)
"#;

/// What the import came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Imports,
    /// It does not import: the traceback's last line, and whether it is an
    /// `ImportError` (a dependency may be missing).
    Fails {
        line: String,
        import_error: bool,
    },
    /// It could not be told (the import outlasted the bound): a warning.
    Unknown(String),
}

/// A one-shot runner for the FaustBot plugin in `dir` whose "hook" is the
/// importer: the plugin's generated manifest, grant, launcher and sandbox,
/// with the shim's worker replaced by the importer and no persistent worker.
///
/// # Errors
/// What loading the plugin fails with (the caller has loaded it already,
/// so this is rare), as text.
pub fn importer(dir: &Path, cx: &LoadContext<'_>) -> Result<ProcessRunner, String> {
    let generated = crate::faust::generate(dir, cx).map_err(|e| e.to_string())?;
    let mut loaded = generated.loaded;
    loaded.manifest.settings.persistent_subprocess = false;
    loaded.manifest.settings.worker_protocol = WorkerProtocol::Line;
    let loaded = crate::plugin::granted(loaded, cx);
    let shim_dir = generated.readable.first().cloned().ok_or("the FaustBot shim has no directory")?;
    let host_files = crate::plugin::HostFiles {
        launcher_args: vec!["-I".into(), "-c".into(), IMPORTER.into(), shim_dir.into_os_string()],
        readable: generated.readable,
    };
    let (runner, _) = crate::plugin::script_runner_with(loaded, cx, crate::plugin::Venv::OfPlugin, &host_files)
        .map_err(|e| e.to_string())?;
    Ok(runner)
}

/// Runs the importer once.
pub async fn check(runner: &ProcessRunner) -> Outcome {
    let request = HookRequest::Agent(AgentRequest::new(HookName::Register, Default::default()));
    let options = CallOptions { timeout_secs: Some(TIMEOUT_SECS) };
    match runner.call(&request, &options).await {
        Ok(reply) => read_reply(&reply),
        Err(e @ HookError::Timeout { .. }) => Outcome::Unknown(format!(
            "its module did not finish importing within {TIMEOUT_SECS} s, so whether it imports is not known ({e})"
        )),
        Err(e) => Outcome::Fails { line: format!("the import check could not run: {e}"), import_error: false },
    }
}

fn read_reply(reply: &Value) -> Outcome {
    if reply.get("ok").and_then(Value::as_bool) == Some(true) {
        return Outcome::Imports;
    }
    match reply.get("error").and_then(Value::as_str) {
        Some(line) => Outcome::Fails {
            line: line.to_owned(),
            import_error: reply.get("import_error").and_then(Value::as_bool).unwrap_or(false),
        },
        None => Outcome::Fails { line: format!("the import check answered {reply}"), import_error: false },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn replies() {
        assert_eq!(read_reply(&json!({"ok": true})), Outcome::Imports);
        assert_eq!(
            read_reply(&json!({"error": "ModuleNotFoundError: No module named 'x'", "import_error": true})),
            Outcome::Fails { line: "ModuleNotFoundError: No module named 'x'".into(), import_error: true }
        );
        assert!(matches!(read_reply(&json!({"text": "junk"})), Outcome::Fails { import_error: false, .. }));
    }
}
