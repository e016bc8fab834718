#!/usr/bin/env bash
# Runs ctxhost's whole test suite on a fresh machine.
#
# The tests run every supported runtime for real (python, node, bash, go, ruby,
# lua, php, deno, bun and a native binary), a real PostgreSQL and a headless
# Chromium (the dashboard), so this first
# installs the interpreters and the database server that are missing (Debian/Ubuntu package names, and deno and bun
# from npm; as root, or through sudo), then runs `cargo test`. It says what it
# will install, and why, before it does. Extra arguments go to cargo test.
#
#   scripts/test.sh                 install what is missing, then cargo test
#   scripts/test.sh --no-install    list what is missing (and exit 1) instead
set -euo pipefail
cd "$(dirname "$0")/.."

install=1
if [ "${1:-}" = "--no-install" ]; then
    install=0
    shift
fi

missing=() why=()
need() { # need <package> <why> <command>...
    local pkg=$1 reason=$2; shift 2
    for cmd in "$@"; do command -v "$cmd" >/dev/null 2>&1 && return 0; done
    missing+=("$pkg")
    why+=("$pkg: $reason")
}
need python3 "python plugins, FaustBot plugins and the shim's own tests" python3
# Python plugins get their own venv (`ctxhost plugin install`): Debian's python3
# needs python3-venv for `python3 -m venv` (ensurepip).
if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
    missing+=(python3-venv)
    why+=("python3-venv: the per-plugin virtual environments (python3 -m venv)")
fi
need nodejs "node plugins" node
need golang-go "go plugins" go
need ruby "ruby plugins" ruby
need lua5.4 "lua plugins" lua lua5.4
need php-cli "php plugins" php
# The dashboard's browser tests (tests/dashboard.rs) drive headless Chromium through chromedriver.
need chromium "the dashboard's browser tests (headless Chromium)" chromium
need chromium-driver "the dashboard's browser tests (chromedriver)" chromedriver
# ... and headless Firefox through geckodriver, which Debian does not package: crates.io.
need firefox-esr "the dashboard's browser tests (headless Firefox)" firefox-esr firefox
cargo_missing=()
if ! command -v geckodriver >/dev/null 2>&1; then
    cargo_missing+=(geckodriver)
    why+=("geckodriver (cargo install): the dashboard's browser tests (Firefox's WebDriver server)")
fi
# The PostgreSQL store's tests start a throw-away cluster (tests/util/pg.rs):
# Debian keeps initdb and postgres in /usr/lib/postgresql/<version>/bin, off PATH.
has_initdb() {
    command -v initdb >/dev/null 2>&1 && return 0
    local f
    for f in /usr/lib/postgresql/*/bin/initdb; do
        [ -x "$f" ] && return 0
    done
    return 1
}
if ! has_initdb; then
    missing+=(postgresql)
    why+=("postgresql: the PostgreSQL store's tests run a throw-away cluster (initdb, postgres)")
fi
# Deno and Bun come from npm: their packages carry the binaries for this platform.
npm_missing=()
for cmd in deno bun; do
    if ! command -v "$cmd" >/dev/null 2>&1; then
        npm_missing+=("$cmd")
        why+=("$cmd (npm, global): $cmd plugins")
    fi
done
if ((${#npm_missing[@]})); then need npm "to install deno and bun" npm; fi

if ((${#why[@]})); then
    {
        echo "scripts/test.sh: the tests run every runtime for real; missing here:"
        printf '  %s\n' "${why[@]}"
    } >&2
    if ((!install)); then
        {
            ((${#missing[@]})) && echo "install with: apt-get install -y ${missing[*]}"
            ((${#npm_missing[@]})) && echo "and: npm install -g ${npm_missing[*]}"
            ((${#cargo_missing[@]})) && echo "and: cargo install --locked --debug ${cargo_missing[*]}"
            echo "(or run scripts/test.sh without --no-install, as root, to install them)"
        } >&2
        exit 1
    fi
    echo "scripts/test.sh: installing them now (--no-install lists them without installing)" >&2
fi

sudo=()
if ((${#missing[@]} + ${#npm_missing[@]})) && [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo=(sudo); else
        echo "scripts/test.sh: run as root, or install: ${missing[*]} ${npm_missing[*]}" >&2
        exit 1
    fi
fi

if ((${#missing[@]})); then
    echo "scripts/test.sh: installing ${missing[*]}" >&2
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "scripts/test.sh: no apt-get here; install ${missing[*]} (or their equivalents) and run again" >&2
        exit 1
    fi
    "${sudo[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ((${#npm_missing[@]})); then
    echo "scripts/test.sh: installing ${npm_missing[*]} from npm" >&2
    "${sudo[@]}" npm install -g --no-audit --no-fund "${npm_missing[@]}" >/dev/null
fi

# Compiling them takes minutes of CPU: it runs while the tests build (a
# build leaves a core idle for long stretches: linking, the last crates).
cargo_install_pid=
cargo_install_log=
if ((${#cargo_missing[@]})); then
    echo "scripts/test.sh: installing ${cargo_missing[*]} from crates.io (cargo install, while the tests build)" >&2
    cargo_install_log=$(mktemp)
    cargo install --locked --debug --quiet "${cargo_missing[@]}" >"$cargo_install_log" 2>&1 &
    cargo_install_pid=$!
fi

# rust-toolchain.toml pins the toolchain and lists the wasm32-wasip2 target;
# older rustup versions install the toolchain but not its extra targets.
if command -v rustup >/dev/null 2>&1 && ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
    rustup target add wasm32-wasip2
fi

if [ -n "$cargo_install_pid" ]; then
    built=0
    cargo test --no-run "$@" && built=1
    if ! wait "$cargo_install_pid"; then
        cat "$cargo_install_log" >&2
        echo "scripts/test.sh: cargo install --locked --debug ${cargo_missing[*]} failed (above)" >&2
        exit 1
    fi
    rm -f "$cargo_install_log"
    if ((!built)); then
        echo "scripts/test.sh: the tests did not build (above)" >&2
        exit 1
    fi
fi

exec cargo test "$@"
