#!/usr/bin/env bash
# Set up (first run only) and start the gateway; arguments go to `shunter serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
exec .venv/bin/shunter serve "$@"
