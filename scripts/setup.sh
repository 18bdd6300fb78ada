#!/usr/bin/env bash
# Create .venv and install Shunter with its test tools. Idempotent; safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.shunter-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  # Portable llama.cpp build: the native build crashes on q8_0 models on AMX CPUs.
  CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF}" \
    .venv/bin/python -m pip install --quiet -e ".[dev]"
  touch "$stamp"
fi
