#!/usr/bin/env bash
# Write requirements.lock (what the gateway runs on), requirements-dev.lock (that and the
# test tools: what scripts/setup.sh installs) and requirements-gpu.lock (the gateway with the
# vllm extra: what Dockerfile.gpu installs) from pyproject.toml: every package pinned, with
# the sha256 of every file PyPI has for it. The first two hold for any platform; the GPU lock
# for the GPU image's Python (3.12) on x86-64 Linux, the only place vLLM's CUDA wheels run.
# Versions already pinned are kept; `scripts/lock.sh --upgrade` moves them to the newest.
# Needs uv (`python3 -m pip install uv`).
set -euo pipefail
cd "$(dirname "$0")/.."

compile() {
  local out=$1; shift
  uv pip compile pyproject.toml "$@" --generate-hashes \
    --index-url https://pypi.org/simple --no-annotate --quiet \
    --custom-compile-command scripts/lock.sh -o "$out"
}

compile requirements.lock --universal --python-version 3.11 "$@"
compile requirements-dev.lock --universal --python-version 3.11 --extra dev "$@"
# a first GPU lock starts from the runtime's pins, so both images share versions where vLLM allows
[ -f requirements-gpu.lock ] || cp requirements.lock requirements-gpu.lock
compile requirements-gpu.lock --python-platform x86_64-manylinux_2_28 --python-version 3.12 \
  --extra vllm "$@"
