//! The `ctxhost` binary: parse, run, map the outcome to an exit code.

fn main() -> std::process::ExitCode {
    ctxhost::cli::main()
}
