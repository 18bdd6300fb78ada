#!/usr/bin/env bash
# Write requirements.lock (what the gateway runs on) and requirements-dev.lock (that and the
# test tools: what scripts/setup.sh installs) from pyproject.toml: every package pinned, with
# the sha256 of every file PyPI has for it, for any platform. Versions already pinned are
# kept; `scripts/lock.sh --upgrade` moves them to the newest. Needs uv
# (`python3 -m pip install uv`).
set -euo pipefail
cd "$(dirname "$0")/.."

compile() {
  local out=$1; shift
  uv pip compile pyproject.toml "$@" --universal --python-version 3.11 --generate-hashes \
    --index-url https://pypi.org/simple --no-annotate --quiet \
    --custom-compile-command scripts/lock.sh -o "$out"
}

compile requirements.lock "$@"
compile requirements-dev.lock --extra dev "$@"
