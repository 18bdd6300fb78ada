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
  if [ ! -f "$stamp" ]; then
    echo "setup: installing Shunter and its locked dependencies into .venv (once)."
    echo "setup: most of the time goes to compiling llama.cpp (llama-cpp-python builds it from"
    echo "setup: source): about 3 to 4 minutes on an idle 2-core machine, longer on a busy one."
  fi
  # pip says nothing while it downloads and compiles: a line every 30 s says it is alive
  start=$SECONDS
  ( while sleep 30; do
      echo "setup: still installing ($(( (SECONDS - start) / 60 )) min $(( (SECONDS - start) % 60 )) s so far)"
    done ) &
  ticker=$!
  trap 'kill "$ticker" 2>/dev/null || true' EXIT
  .venv/bin/python -m pip install --quiet --upgrade pip
  # Dependencies exactly as locked, each file checked against its sha256
  # (scripts/lock.sh writes the lock); then Shunter itself, editable.
  # Portable llama.cpp build: the native build crashes on q8_0 models on AMX CPUs.
  # Only what the gateway loads is compiled: libllama and ggml (scripts/llama-cpp.cmake).
  only_libllama="-DCMAKE_PROJECT_llama.cpp_INCLUDE=$PWD/scripts/llama-cpp.cmake"
  CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF $only_libllama}" \
    .venv/bin/python -m pip install --quiet --require-hashes -r requirements-dev.lock
  .venv/bin/python -m pip install --quiet --no-deps -e .
  kill "$ticker" 2>/dev/null || true
  touch "$stamp"
  echo "setup: .venv is ready ($(( (SECONDS - start) / 60 )) min $(( (SECONDS - start) % 60 )) s)."
fi
