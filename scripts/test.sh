#!/usr/bin/env bash
# Runs ctxhost's whole test suite on a fresh machine.
#
# The tests run every supported runtime for real (python, node, bash, go, ruby,
# lua, php, deno, bun and a native binary), so this first installs the
# interpreters that are missing (Debian/Ubuntu package names, and deno and bun
# from npm; as root, or through sudo), then runs `cargo test`. Extra arguments
# go to cargo test.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
need() { # need <package> <command>...
    local pkg=$1; shift
    for cmd in "$@"; do command -v "$cmd" >/dev/null 2>&1 && return 0; done
    missing+=("$pkg")
}
need python3 python3
# Python plugins get their own venv (`ctxhost plugin install`): Debian's python3
# needs python3-venv for `python3 -m venv` (ensurepip).
if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
    missing+=(python3-venv)
fi
need nodejs node
need golang-go go
need ruby ruby
need lua5.4 lua lua5.4
need php-cli php
# Deno and Bun come from npm: their packages carry the binaries for this platform.
npm_missing=()
for cmd in deno bun; do command -v "$cmd" >/dev/null 2>&1 || npm_missing+=("$cmd"); done
if ((${#npm_missing[@]})); then need npm npm; fi

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

# rust-toolchain.toml pins the toolchain and lists the wasm32-wasip2 target;
# older rustup versions install the toolchain but not its extra targets.
if command -v rustup >/dev/null 2>&1 && ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
    rustup target add wasm32-wasip2
fi

exec cargo test "$@"
