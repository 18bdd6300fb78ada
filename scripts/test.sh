#!/usr/bin/env bash
# Set up everything and run the whole check: format, lint, types, tests.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
.venv/bin/ruff format --check gateway backends policies tests bench
.venv/bin/ruff check gateway backends policies tests bench
.venv/bin/mypy
.venv/bin/pytest -q "$@"
