//! Launchers: the runtime table of spec section 4 turned into programs on disk.
//!
//! A launcher is resolved to an absolute path **once** (at load or reload),
//! never per call: LibreFang re-probes `python3 --version` on every call. When
//! the program found on PATH is a version-manager shim (pyenv, asdf, …), it is
//! replaced by the real interpreter it would run (see [`super::shim`]).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::manifest::Runtime;

/// The static facts about one runtime.
#[derive(Debug, Clone, Copy)]
pub struct RuntimeInfo {
    /// Program names to look for on PATH, first found wins. Empty: no launcher.
    pub programs: &'static [&'static str],
    /// Arguments between the program and the script.
    pub args: &'static [&'static str],
    /// Host variables passed through to the hook when set.
    pub passthrough: &'static [&'static str],
    /// Arguments that print the version.
    pub version_args: &'static [&'static str],
    /// Arguments that print the absolute path of the real interpreter, used
    /// to see through version-manager shims.
    pub exe_query: Option<&'static [&'static str]>,
    pub install_hint: &'static str,
}

/// The runtime table. Install hints are LibreFang's wording.
pub fn info(runtime: &Runtime) -> RuntimeInfo {
    const VERSION: &[&str] = &["--version"];
    let r = |programs, args, passthrough, exe_query, install_hint| RuntimeInfo {
        programs,
        args,
        passthrough,
        version_args: VERSION,
        exe_query,
        install_hint,
    };
    match runtime {
        Runtime::Python => r(
            &["python3", "python", "py"],
            // No bytecode written: a hook importing a module of its own
            // would leave `__pycache__/` in the plugin's dir (an argument,
            // not PYTHONDONTWRITEBYTECODE: the environment stays the spec's,
            // and FaustBot's isolated `-I` worker would ignore the variable).
            &["-B"],
            &["PYTHONPATH", "VIRTUAL_ENV", "PYTHONIOENCODING"],
            // Isolated (`-I`): the query runs from the plugin dir, which must
            // not be on `sys.path`, and ignores `PYTHON*` variables.
            Some(&["-I", "-c", "import sys; print(sys.executable)"]),
            "Install Python 3 from https://www.python.org/downloads/ or your OS package manager",
        ),
        Runtime::Native => {
            r(&[], &[], &[], None, "Native runtimes have no launcher — make sure the script is executable")
        }
        Runtime::V => r(
            &["v"],
            &["-no-retry-compilation", "run"],
            &["VMODULES"],
            None,
            "Install V from https://vlang.io/#install (`v` must be on PATH)",
        ),
        Runtime::Node => r(
            &["node"],
            &[],
            &["NODE_PATH"],
            Some(&["-e", "console.log(process.execPath)"]),
            "Install Node.js from https://nodejs.org/ (or via nvm/fnm/volta)",
        ),
        Runtime::Deno => r(
            &["deno"],
            &["run", "--allow-read", "--allow-env"],
            &["DENO_DIR"],
            Some(&["eval", "console.log(Deno.execPath())"]),
            "Install Deno from https://deno.com/ (`curl -fsSL https://deno.land/install.sh | sh`)",
        ),
        Runtime::Go => RuntimeInfo {
            version_args: &["version"],
            ..r(
                &["go"],
                &["run"],
                &["GOPATH", "GOMODCACHE", "GOCACHE"],
                Some(&["env", "GOROOT"]),
                "Install Go from https://go.dev/dl/ (`go` must be on PATH)",
            )
        },
        Runtime::Ruby => r(
            &["ruby"],
            &[],
            &["RUBYLIB", "RUBYOPT", "GEM_HOME", "GEM_PATH"],
            Some(&["-e", "puts RbConfig.ruby"]),
            "Install Ruby from https://www.ruby-lang.org/en/downloads/ (or via rbenv/rvm/asdf)",
        ),
        Runtime::Bash => r(
            &["bash"],
            &[],
            &[],
            None,
            "Install bash via your OS package manager (pre-installed on most Unix-like systems)",
        ),
        Runtime::Bun => r(
            &["bun"],
            &["run"],
            &["BUN_INSTALL"],
            Some(&["-e", "console.log(process.execPath)"]),
            "Install Bun from https://bun.sh/ (`curl -fsSL https://bun.sh/install | bash`)",
        ),
        Runtime::Php => r(
            &["php"],
            &[],
            &["PHP_INI_SCAN_DIR"],
            Some(&["-r", "echo PHP_BINARY, PHP_EOL;"]),
            "Install PHP from https://www.php.net/downloads.php or your OS package manager",
        ),
        Runtime::Lua => RuntimeInfo {
            version_args: &["-v"],
            ..r(
                &["lua", "lua5.4", "lua5.3"],
                &[],
                &["LUA_PATH", "LUA_CPATH"],
                None,
                "Install Lua from https://www.lua.org/download.html or your OS package manager",
            )
        },
        Runtime::Wasm => r(
            &[],
            &[],
            &[],
            None,
            "Wasm hooks run inline via the built-in wasmtime engine — no external launcher needed",
        ),
        Runtime::Custom(_) => r(
            &[],
            &[],
            &[],
            None,
            "Custom runtime: verify that the binary path is correct and the binary is executable",
        ),
    }
}

/// Finds `program` on `path` (a PATH value): the first entry holding an
/// executable file of that name. The path is returned as found (symlinks are
/// not resolved: some shims dispatch on their own name).
pub fn find_on_path(program: &str, path: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    let path = path?;
    std::env::split_paths(path).filter(|dir| dir.is_absolute()).map(|dir| dir.join(program)).find(|p| is_executable(p))
}

/// A regular file with an execute bit.
pub fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// How the hook scripts of one plugin are started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Launcher {
    /// `<program> <args…> <script>`.
    Program { program: PathBuf, args: Vec<OsString> },
    /// The script is executed itself (runtime `native`).
    Direct,
    /// No launcher could be found; each call fails with this reason.
    Missing { launcher: String, reason: String },
    /// Runs in-process, not as a process.
    InProcess,
}

/// `program` plus `args` plus `script`, ready to spawn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandLine {
    pub program: PathBuf,
    pub args: Vec<OsString>,
}

impl Launcher {
    /// The command that runs `script`. A `native` script that is not
    /// executable but starts with `#!` runs through its shebang interpreter.
    pub fn command_for(&self, script: &Path) -> Result<CommandLine, String> {
        match self {
            Launcher::Program { program, args } => {
                let mut args = args.clone();
                args.push(script.as_os_str().to_owned());
                Ok(CommandLine { program: program.clone(), args })
            }
            Launcher::Direct if is_executable(script) => {
                Ok(CommandLine { program: script.to_owned(), args: Vec::new() })
            }
            Launcher::Direct => shebang(script).ok_or_else(|| {
                format!(
                    "Native hook '{}' is neither executable nor a script with a `#!` line (chmod +x it)",
                    script.display()
                )
            }),
            Launcher::Missing { launcher, reason } => {
                Err(format!("Runtime launcher '{launcher}' not found on PATH: {reason}"))
            }
            Launcher::InProcess => Err("wasm hooks are not run as processes".to_owned()),
        }
    }

    /// The program path, for reports.
    pub fn program(&self) -> Option<&Path> {
        match self {
            Launcher::Program { program, .. } => Some(program),
            _ => None,
        }
    }
}

/// `#!/usr/bin/env python3 -u` → `/usr/bin/env ["python3 -u", script]`, as the
/// kernel would split it (one optional argument).
fn shebang(script: &Path) -> Option<CommandLine> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(script).ok()?.read(&mut head).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = &line[..line.iter().position(|&b| b == b'\n').unwrap_or(line.len())];
    let line = std::str::from_utf8(line).ok()?.trim();
    let (interp, arg) = match line.split_once([' ', '\t']) {
        Some((i, a)) => (i, Some(a.trim())),
        None => (line, None),
    };
    if interp.is_empty() {
        return None;
    }
    let mut args: Vec<OsString> = arg.filter(|a| !a.is_empty()).map(OsString::from).into_iter().collect();
    args.push(script.as_os_str().to_owned());
    Some(CommandLine { program: PathBuf::from(interp), args })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shebang_is_split_like_the_kernel() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("hook");
        std::fs::write(&script, "#!/usr/bin/env python3 -u\nprint(1)\n").unwrap();
        let cmd = Launcher::Direct.command_for(&script).unwrap();
        assert_eq!(cmd.program, PathBuf::from("/usr/bin/env"));
        assert_eq!(cmd.args, [OsString::from("python3 -u"), script.clone().into_os_string()]);

        std::fs::write(&script, "no shebang").unwrap();
        let err = Launcher::Direct.command_for(&script).unwrap_err();
        assert!(err.contains("neither executable nor a script"), "{err}");
    }

    #[test]
    fn find_on_path_skips_relative_and_non_executable_entries() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(a.join("tool"), "x").unwrap();
        std::fs::write(b.join("tool"), "x").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(b.join("tool"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = std::env::join_paths([PathBuf::from("rel"), a, b.clone()]).unwrap();
        assert_eq!(find_on_path("tool", Some(&path)), Some(b.join("tool")));
        assert_eq!(find_on_path("nope", Some(&path)), None);
    }
}
