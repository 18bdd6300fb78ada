#!/usr/bin/env bash
# Create .venv and install Shunter with its test tools. Idempotent; safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.shunter-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ requirements-dev.lock -nt "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  # Dependencies exactly as locked, each file checked against its sha256
  # (scripts/lock.sh writes the lock); then Shunter itself, editable.
  # Portable llama.cpp build: the native build crashes on q8_0 models on AMX CPUs.
  CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF}" \
    .venv/bin/python -m pip install --quiet --require-hashes -r requirements-dev.lock
  .venv/bin/python -m pip install --quiet --no-deps -e .
  touch "$stamp"
fi
