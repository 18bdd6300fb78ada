#!/usr/bin/env bash
# Gateway overhead against a fake nginx upstream, with the LiteLLM baseline in the same run.
# Uses the shared harness (HARNESS, default ../shared/bench-overhead next to this clone).
#   bench/overhead/run.sh              # Shunter only (plus the direct baseline)
#   WITH_LITELLM=1 WITH_PORTKEY=1 bench/overhead/run.sh   # the baselines in the same sitting
# Needs: nginx-light, wrk (apt), the harness client venv, and for the baselines the harness's
# gateways/litellm/setup.sh and gateways/portkey/setup.sh (see the harness README).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
HARNESS=${HARNESS:-$root/../shared/bench-overhead}
export RUN_DIR=${RUN_DIR:-/tmp/bench-run}
export OUT_DIR=${OUT_DIR:-$RUN_DIR/results}
export PY=${PY:-$RUN_DIR/clientenv/bin/python}
mkdir -p "$OUT_DIR"
cd "$HARNESS"
LABEL=shunter BASE_URL=http://127.0.0.1:8080 MODEL=fake STREAM_MODEL=fake-stream \
  API_KEY=sk-bench READY_URL=http://127.0.0.1:8080/health/readiness \
  GATEWAY_CMD="$root/.venv/bin/shunter serve --config $root/bench/overhead/shunter.yaml --port 8080 --log-level warning" \
  ./bench_gateway.sh
if [ "${WITH_LITELLM:-0}" = 1 ]; then
  SKIP_DIRECT=1 VENV=${VENV:-$RUN_DIR/litellm-venv} gateways/litellm/run.sh
fi
if [ "${WITH_PORTKEY:-0}" = 1 ]; then
  SKIP_DIRECT=1 gateways/portkey/run.sh
fi
"$PY" summarize.py "$OUT_DIR" > "$OUT_DIR/summary.md" 2>/dev/null || true
cat "$OUT_DIR/summary.md"
