//! Every shell example in `README.md` and `docs/**/*.md` is run by a test.
//!
//! A fenced block whose language is `sh`, `bash`, `shell`, `console` or `zsh` is a shell
//! example, and must carry one of two marks (the rules are repeated for contributors at the
//! top of `docs/README.md`):
//!
//! - **runnable**: the info string says so, ```` ```sh runnable ```` (optionally `exit=N`
//!   when the block is meant to end with status N, e.g. to show an error). The runnable
//!   blocks of one file run in order, as a reader following the page would: in one fresh
//!   sandbox per file (a temp dir holding a copy of `guest-examples/`, `HOME` and
//!   `CTXHOST_HOME=$HOME/.ctxhost` inside it, `TMPDIR` inside it, the freshly built
//!   `ctxhost` first on `PATH`), each block under `bash -e -o pipefail` with stdin from
//!   `/dev/null` and a time limit, starting in the directory where the previous block of the
//!   file ended. Whatever a block leaves running (`ctxhost serve &`) is killed when it ends.
//!   A `# → TEXT` comment (on its own line or after a command) is expected output: each
//!   TEXT must appear in the block's output (stdout and stderr, merged), in order; `…`
//!   inside TEXT stands for anything.
//! - **tested-by**: an HTML comment on the line before the fence,
//!   `<!-- tested-by: tests/cli.rs::demo_runs_the_bundled_stack_and_reports_json -->`, naming a
//!   test function (a path under `tests/` or `src/`, then `::`, then the function's name; the
//!   function must exist there and be a `#[test]`). For blocks that cannot run here: a daemon
//!   that blocks forever, an install from the network, the README's own set-up commands.
//!
//! A fence with no language at all is refused too (say ```` ```text ````, ```` ```json ````,
//! …), so no shell example slips through unmarked.

use std::collections::VecDeque;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::util::repo_root;

/// How long one runnable block may take.
const BLOCK_TIMEOUT: Duration = Duration::from_secs(60);

const SHELL_LANGUAGES: &[&str] = &["sh", "bash", "shell", "console", "zsh"];

/// What a shell block must do to pass.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Mark {
    /// Run it; it must exit with this status.
    Runnable { exit: i32 },
    /// `(path, function)`: this test runs what the block shows.
    TestedBy(Vec<(String, String)>),
}

/// One shell block of one file.
#[derive(Debug, Clone)]
struct Block {
    file: String,
    /// 1-based line of the opening fence.
    line: usize,
    code: String,
    mark: Mark,
}

impl Block {
    fn place(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }
}

/// The shell blocks of one markdown text, or what is wrong with its fences.
fn shell_blocks(file: &str, text: &str) -> (Vec<Block>, Vec<String>) {
    let mut blocks = Vec::new();
    let mut problems = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let trimmed = lines[i].trim_start();
        let fence_char = match trimmed.chars().next() {
            Some(c @ ('`' | '~')) => c,
            _ => {
                i += 1;
                continue;
            }
        };
        let fence_len = trimmed.chars().take_while(|&c| c == fence_char).count();
        if fence_len < 3 {
            i += 1;
            continue;
        }
        let indent = lines[i].len() - trimmed.len();
        let info = trimmed[fence_len..].trim();
        // CommonMark: a backtick fence's info string holds no backtick (else it is inline code).
        if fence_char == '`' && info.contains('`') {
            i += 1;
            continue;
        }
        let start = i;
        let mut body = Vec::new();
        i += 1;
        while i < lines.len() {
            let t = lines[i].trim();
            if t.len() >= fence_len && t.chars().all(|c| c == fence_char) {
                break;
            }
            // Lines of a block inside a list item carry the item's indentation.
            let line = lines[i];
            let cut = line.len() - line.trim_start().len();
            body.push(&line[cut.min(indent)..]);
            i += 1;
        }
        if i >= lines.len() {
            problems.push(format!("{file}:{}: the fence opened here is never closed", start + 1));
        }
        i += 1;
        let mut words = info.split_whitespace();
        let Some(language) = words.next() else {
            problems.push(format!(
                "{file}:{}: a fenced block without a language; say what it is (```sh runnable, ```text, ```json, …)",
                start + 1
            ));
            continue;
        };
        if !SHELL_LANGUAGES.contains(&language.to_ascii_lowercase().as_str()) {
            continue;
        }
        let code = body.join("\n");
        let mut runnable = false;
        let mut exit = 0;
        for word in words {
            match word.split_once('=') {
                None if word == "runnable" => runnable = true,
                Some(("exit", n)) if n.parse::<i32>().is_ok() => exit = n.parse().unwrap_or(0),
                _ => problems.push(format!(
                    "{file}:{}: unknown word `{word}` in the info string (known: runnable, exit=N)",
                    start + 1
                )),
            }
        }
        let tested_by = tested_by_comment(&lines[..start]);
        let mark = match (runnable, tested_by) {
            (true, None) => Mark::Runnable { exit },
            (false, Some(Ok(tests))) => Mark::TestedBy(tests),
            (false, Some(Err(e))) | (true, Some(Err(e))) => {
                problems.push(format!("{file}:{}: {e}", start + 1));
                continue;
            }
            (true, Some(Ok(_))) => {
                problems.push(format!("{file}:{}: a block is either runnable or tested-by, not both", start + 1));
                continue;
            }
            (false, None) => {
                problems.push(format!(
                    "{file}:{}: a shell block with no mark: make it ```{language} runnable, or put \
                     `<!-- tested-by: tests/<file>.rs::<test> -->` on the line before it",
                    start + 1
                ));
                continue;
            }
        };
        blocks.push(Block { file: file.to_owned(), line: start + 1, code, mark });
    }
    (blocks, problems)
}

/// The `<!-- tested-by: a::b, c::d -->` comment on the last non-blank line before a fence.
fn tested_by_comment(before: &[&str]) -> Option<Result<Vec<(String, String)>, String>> {
    let prev = before.iter().rev().find(|l| !l.trim().is_empty())?.trim();
    let inner = prev.strip_prefix("<!--")?.strip_suffix("-->")?.trim();
    let list = inner.strip_prefix("tested-by:")?;
    let mut tests = Vec::new();
    for item in list.split(',') {
        let item = item.trim();
        match item.rsplit_once("::") {
            Some((path, name)) if !path.is_empty() && !name.is_empty() => {
                tests.push((path.to_owned(), name.to_owned()));
            }
            _ => {
                return Some(Err(format!(
                    "`tested-by: {item}` must name a test as <path>::<function>, e.g. tests/cli.rs::help_has_examples"
                )));
            }
        }
    }
    Some(Ok(tests))
}

/// Checks that `path::name` is a test function of the repository.
fn check_test_exists(root: &Path, path: &str, name: &str) -> Result<(), String> {
    if !(path.starts_with("tests/") || path.starts_with("src/")) || path.contains("..") {
        return Err(format!("`{path}` is not a file under tests/ or src/"));
    }
    let text = std::fs::read_to_string(root.join(path)).map_err(|e| format!("`{path}`: {e}"))?;
    let lines: Vec<&str> = text.lines().collect();
    let Some(at) = lines.iter().position(|l| {
        let mut l = l.trim_start();
        for prefix in ["pub(crate) ", "pub ", "async "] {
            l = l.strip_prefix(prefix).unwrap_or(l);
        }
        l.starts_with(&format!("fn {name}("))
    }) else {
        return Err(format!("`{path}` has no function `{name}`"));
    };
    // Attributes and doc comments sit right above the function.
    let is_test = lines[..at]
        .iter()
        .rev()
        .take_while(|l| {
            let l = l.trim_start();
            l.starts_with("#[") || l.starts_with("//") || l.is_empty()
        })
        .any(|l| {
            let l = l.trim_start();
            l.starts_with("#[test]") || l.starts_with("#[tokio::test")
        });
    if !is_test {
        return Err(format!("`{path}::{name}` is not a #[test] function"));
    }
    Ok(())
}

/// README.md and every `.md` under docs/, as (path relative to the repository, text).
fn doc_files(root: &Path) -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut paths = vec![root.join("README.md")];
    walk(&root.join("docs"), &mut paths);
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(root).unwrap_or(&p).to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{rel}: {e}"));
            (rel, text)
        })
        .collect()
}

/// Every shell block of the docs, or the list of what is wrong.
fn all_blocks(root: &Path) -> Result<Vec<Block>, Vec<String>> {
    let mut blocks = Vec::new();
    let mut problems = Vec::new();
    for (file, text) in doc_files(root) {
        let (b, p) = shell_blocks(&file, &text);
        blocks.extend(b);
        problems.extend(p);
    }
    for block in &blocks {
        if let Mark::TestedBy(tests) = &block.mark {
            for (path, name) in tests {
                if let Err(e) = check_test_exists(root, path, name) {
                    problems.push(format!("{}: tested-by: {e}", block.place()));
                }
            }
        }
    }
    if problems.is_empty() { Ok(blocks) } else { Err(problems) }
}

/// The `# → TEXT` expectations of a block, in order.
fn expectations(code: &str) -> Vec<String> {
    code.lines()
        .filter_map(|l| l.split_once("# → ").map(|(_, want)| want.trim().to_owned()))
        .filter(|w| !w.is_empty())
        .collect()
}

/// Finds each expectation in `output` after the previous one; `…` matches anything.
fn check_output(output: &str, wanted: &[String]) -> Result<(), String> {
    let mut at = 0;
    for want in wanted {
        for piece in want.split('…').map(str::trim).filter(|p| !p.is_empty()) {
            match output[at..].find(piece) {
                Some(pos) => at += pos + piece.len(),
                None => return Err(format!("expected output `{want}`: `{piece}` not found (in order)")),
            }
        }
    }
    Ok(())
}

/// One file's sandbox: the temp dir its runnable blocks share.
struct Sandbox {
    root: tempfile::TempDir,
}

impl Sandbox {
    fn new(repo: &Path) -> Sandbox {
        let root = tempfile::Builder::new().prefix("ctxhost-docs-").tempdir().expect("temp dir");
        let work = root.path().join("work");
        copy_tree(&repo.join("guest-examples"), &work.join("guest-examples"));
        for dir in ["home", "tmp", "bin"] {
            std::fs::create_dir_all(root.path().join(dir)).unwrap();
        }
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_ctxhost"), root.path().join("bin/ctxhost")).unwrap();
        std::fs::write(root.path().join("cwd"), work.to_string_lossy().as_bytes()).unwrap();
        Sandbox { root }
    }

    /// Runs one block; Err says why it failed, with its output.
    fn run(&self, block: &Block, exit: i32) -> Result<(), String> {
        let root = self.root.path();
        let cwd_file = root.join("cwd");
        let cwd = std::fs::read_to_string(&cwd_file).unwrap_or_default();
        let script = format!(
            "set -eo pipefail\nexec 2>&1\ncd {cwd}\ntrap 'pwd > {file}' EXIT\n{code}\n",
            cwd = shell_quote(cwd.trim()),
            file = shell_quote(&cwd_file.to_string_lossy()),
            code = block.code,
        );
        let path = std::env::var("PATH").unwrap_or_default();
        let home = root.join("home");
        let mut cmd = Command::new("bash");
        cmd.args(["--noprofile", "--norc", "-c", &script])
            .env("PATH", format!("{}:{path}", root.join("bin").display()))
            .env("HOME", &home)
            .env("CTXHOST_HOME", home.join(".ctxhost"))
            .env("TMPDIR", root.join("tmp"))
            .env_remove("RUST_LOG")
            .env_remove("CTXHOST_PLUGINS_DIR")
            .env_remove("CTXHOST_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0);
        let mut child = cmd.spawn().map_err(|e| format!("cannot start bash: {e}"))?;
        let pgid = child.id() as i32;
        let mut stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut out = Vec::new();
            let _ = stdout.read_to_end(&mut out);
            let _ = tx.send(out);
        });
        let started = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if started.elapsed() > BLOCK_TIMEOUT => break None,
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => return Err(format!("waiting for bash: {e}")),
            }
        };
        // Whatever the block left running (a daemon in the background) goes now.
        // SAFETY: kill(2) on the block's own process group, which this test created.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        let _ = child.wait();
        let output = rx.recv_timeout(Duration::from_secs(10)).unwrap_or_default();
        let output = String::from_utf8_lossy(&output).into_owned();
        let shown = || format!("\n--- block ---\n{}\n--- output ---\n{output}", block.code);
        let Some(status) = status else {
            return Err(format!("did not finish within {BLOCK_TIMEOUT:?}{}", shown()));
        };
        if status.code() != Some(exit) {
            return Err(format!("exited with {status}, expected {exit}{}", shown()));
        }
        check_output(&output, &expectations(&block.code)).map_err(|e| format!("{e}{}", shown()))
    }
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Copies a directory tree, leaving out build output and caches.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display())) {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if ["target", "__pycache__", "node_modules", "memory.jsonl"].iter().any(|n| name == *n) {
            continue;
        }
        let ty = entry.file_type().unwrap();
        if ty.is_dir() {
            copy_tree(&entry.path(), &to.join(&name));
        } else if ty.is_file() {
            std::fs::copy(entry.path(), to.join(&name)).unwrap();
        }
    }
}

/// Runs the runnable blocks, one sandbox per file, files in parallel; the failures.
fn run_blocks(repo: &Path, blocks: &[Block]) -> Vec<String> {
    let mut files: Vec<Vec<&Block>> = Vec::new();
    for block in blocks.iter().filter(|b| matches!(b.mark, Mark::Runnable { .. })) {
        match files.last_mut() {
            Some(last) if last[0].file == block.file => last.push(block),
            _ => files.push(vec![block]),
        }
    }
    let queue = Mutex::new(files.into_iter().collect::<VecDeque<_>>());
    let failures = Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(2, 4);
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                loop {
                    let Some(file) = queue.lock().unwrap().pop_front() else { break };
                    let sandbox = Sandbox::new(repo);
                    for block in file {
                        let Mark::Runnable { exit } = block.mark else { continue };
                        if let Err(e) = sandbox.run(block, exit) {
                            failures.lock().unwrap().push(format!("{}: {e}", block.place()));
                            break; // later blocks of the page build on this one
                        }
                    }
                }
            });
        }
    });
    failures.into_inner().unwrap()
}

#[test]
fn every_shell_block_in_the_docs_is_runnable_or_names_its_test() {
    let root = repo_root();
    let blocks = all_blocks(&root).unwrap_or_else(|problems| panic!("\n{}\n", problems.join("\n")));
    // The README and the guides are there, and their examples with them.
    let files: std::collections::BTreeSet<&str> = blocks.iter().map(|b| b.file.as_str()).collect();
    for file in ["README.md", "docs/guides/script.md", "docs/guides/worker.md", "docs/guides/faustbot.md"] {
        assert!(files.contains(file), "no shell example found in {file}: {files:?}");
    }
}

#[test]
fn the_runnable_shell_blocks_of_the_docs_run() {
    let root = repo_root();
    let blocks = all_blocks(&root).unwrap_or_else(|problems| panic!("\n{}\n", problems.join("\n")));
    let runnable = blocks.iter().filter(|b| matches!(b.mark, Mark::Runnable { .. })).count();
    assert!(runnable >= 10, "only {runnable} runnable blocks: were the marks lost?");
    let failures = run_blocks(&root, &blocks);
    assert!(failures.is_empty(), "\n{}\n", failures.join("\n\n"));
}

#[test]
fn the_checker_refuses_unmarked_unlabelled_and_dangling_blocks() {
    let text = "\
# t

```sh
ctxhost doctor
```

```
no language
```

<!-- tested-by: tests/cli.rs::help_has_examples -->
```bash
ctxhost serve
```

<!-- tested-by: tests/cli.rs::no_such_test -->
```sh
ctxhost serve
```

- a list item:
  ```sh runnable exit=1
  false
  ```

```toml
x = 1
```

```sh runnable sometimes
true
```

```` ```sh ```` at the start of a line is inline code, not a fence.
";
    let (blocks, problems) = shell_blocks("t.md", text);
    assert_eq!(problems.len(), 3, "{problems:#?}");
    assert!(problems[0].starts_with("t.md:3: a shell block with no mark"), "{problems:#?}");
    assert!(problems[1].starts_with("t.md:7: a fenced block without a language"), "{problems:#?}");
    assert!(problems[2].contains("t.md:30: unknown word `sometimes`"), "{problems:#?}");
    assert_eq!(blocks.len(), 4, "{blocks:#?}");
    assert_eq!(blocks[0].mark, Mark::TestedBy(vec![("tests/cli.rs".into(), "help_has_examples".into())]));
    assert_eq!(blocks[2].mark, Mark::Runnable { exit: 1 });
    assert_eq!(blocks[2].code, "false", "the list item's indentation is cut");

    let root = repo_root();
    assert_eq!(check_test_exists(&root, "tests/cli.rs", "help_has_examples"), Ok(()));
    let missing = check_test_exists(&root, "tests/cli.rs", "no_such_test").unwrap_err();
    assert!(missing.contains("has no function `no_such_test`"), "{missing}");
    let helper = check_test_exists(&root, "tests/util/mod.rs", "ctxhost").unwrap_err();
    assert!(helper.contains("is not a #[test] function"), "{helper}");
    assert!(check_test_exists(&root, "../etc/passwd", "x").is_err());
}

#[test]
fn the_runner_fails_on_a_wrong_exit_status_or_missing_output_and_carries_the_directory() {
    let root = repo_root();
    let block = |code: &str, exit: i32| Block {
        file: "t.md".into(),
        line: 1,
        code: code.into(),
        mark: Mark::Runnable { exit },
    };
    let sandbox = Sandbox::new(&root);
    // ctxhost is the freshly built one, and the home is the sandbox's.
    let ok = block("ctxhost --version   # → ctxhost …\necho \"$CTXHOST_HOME\"   # → /home/.ctxhost", 0);
    sandbox.run(&ok, 0).unwrap();
    let wrong_output = sandbox.run(&block("echo one   # → two", 0), 0).unwrap_err();
    assert!(wrong_output.starts_with("expected output `two`"), "{wrong_output}");
    let out_of_order = sandbox.run(&block("echo b; echo a\n# → a\n# → b", 0), 0).unwrap_err();
    assert!(out_of_order.contains("`b` not found (in order)"), "{out_of_order}");
    let failed = sandbox.run(&block("false\necho not reached", 0), 0).unwrap_err();
    assert!(failed.starts_with("exited with exit status: 1, expected 0"), "{failed}");
    sandbox.run(&block("echo oops >&2; exit 3   # → oops", 3), 3).unwrap();
    // The next block starts where the previous one ended.
    sandbox.run(&block("mkdir -p deeper && cd deeper", 0), 0).unwrap();
    sandbox.run(&block("pwd   # → /work/deeper", 0), 0).unwrap();
    // A block's background process does not outlive it.
    let started = Instant::now();
    sandbox.run(&block("sleep 300 &\necho started   # → started", 0), 0).unwrap();
    assert!(started.elapsed() < Duration::from_secs(20));
}

/// The README's second set-up command: `scripts/test.sh --no-install` on a machine
/// that has none of the runtimes lists each with why it is needed and the install
/// commands, installs nothing and exits 1 (never reaching `cargo test`).
#[test]
fn test_sh_no_install_lists_what_is_missing_and_installs_nothing() {
    let root = repo_root();
    let bin = tempfile::tempdir().unwrap();
    for program in ["bash", "dirname"] {
        let found = ["/usr/bin", "/bin"].iter().map(|d| Path::new(d).join(program)).find(|p| p.exists());
        std::os::unix::fs::symlink(found.expect(program), bin.path().join(program)).unwrap();
    }
    let out = Command::new(root.join("scripts/test.sh"))
        .arg("--no-install")
        .env("PATH", bin.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stdout));
    for line in [
        "the tests run every runtime for real; missing here:",
        "python3: python plugins",
        "nodejs: node plugins",
        "golang-go: go plugins",
        "deno (npm, global): deno plugins",
        "install with: apt-get install -y python3 python3-venv nodejs golang-go ruby lua5.4 php-cli chromium chromium-driver firefox-esr npm",
        "and: npm install -g deno bun",
        "and: cargo install --locked --debug geckodriver",
    ] {
        assert!(stderr.contains(line), "missing `{line}` in:\n{stderr}");
    }
    assert!(!stderr.contains("installing"), "{stderr}");
}
