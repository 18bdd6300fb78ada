#!/usr/bin/env bash
# Set up everything and run the whole check: format, lint, types, tests.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
# the tests start their own redis-server processes on free loopback ports
if ! command -v redis-server >/dev/null; then
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq redis-server >/dev/null
fi
# the status page's browser test drives a real headless Chromium (under a minute to install)
if ! command -v chromium >/dev/null && command -v apt-get >/dev/null; then
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq chromium >/dev/null
fi
.venv/bin/ruff format --check gateway backends policies tests bench
.venv/bin/ruff check gateway backends policies tests bench
.venv/bin/mypy
.venv/bin/lint-imports --no-cache  # the layer contracts in pyproject.toml
# the documentation site: every page in the navigation, every link and anchor resolved
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet  # into site/, ignored by git
# the tests wait on servers and sockets far more than they compute: four processes, each
# test file whole in one of them (its module servers started once, its tests in order)
.venv/bin/pytest -q -n "${SHUNTER_TEST_PROCESSES:-4}" --dist loadfile "$@"
