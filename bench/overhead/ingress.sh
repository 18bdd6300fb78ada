#!/usr/bin/env bash
# Gateway CPU per request of /v1/responses and /v1/messages against /v1/chat/completions, in one
# sitting: the harness's fake upstream (it speaks chat: both APIs are translated to chat) on CPU 0
# with wrk, the gateway pinned to CPU 1. Rounds interleave the APIs, so drift hits all alike.
#   bench/overhead/ingress.sh            # ROUNDS=3 DURATION=10 CONNECTIONS=32
#   APIS=chat CODE=/tmp/older bench/overhead/ingress.sh   # chat alone, on another tree
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
HARNESS=${HARNESS:-$root/../shared/bench-overhead}
export RUN_DIR=${RUN_DIR:-/tmp/bench-run}
ROUNDS=${ROUNDS:-3} DURATION=${DURATION:-10} CONNECTIONS=${CONNECTIONS:-32} PORT=${PORT:-8080}
mkdir -p "$RUN_DIR"
user='Say something short about gateway overhead.'
declare -A PATHS=(
  [chat]=/v1/chat/completions [responses]=/v1/responses
  [responses_nostore]=/v1/responses [messages]=/v1/messages
)
declare -A BODIES=(
  [chat]='{"model":"fake","messages":[{"role":"system","content":"You are a benchmark."},{"role":"user","content":"'"$user"'"}],"max_tokens":32}'
  [responses]='{"model":"fake","instructions":"You are a benchmark.","input":"'"$user"'","max_output_tokens":32}'
  [responses_nostore]='{"model":"fake","instructions":"You are a benchmark.","input":"'"$user"'","max_output_tokens":32,"store":false}'
  [messages]='{"model":"fake","system":"You are a benchmark.","messages":[{"role":"user","content":"'"$user"'"}],"max_tokens":32}'
)
APIS=${APIS:-chat responses responses_nostore messages}

started_upstream=0
if ! curl -fsS -o /dev/null http://127.0.0.1:9000/v1/models 2>/dev/null; then
  "$HARNESS/upstream/start_upstream.sh" && started_upstream=1
fi
# CODE: another checkout's tree to measure (e.g. an exported older commit), same venv
(cd "${CODE:-$root}" && exec taskset -c 1 "$root/.venv/bin/python" -m gateway.cli serve \
  --config "$root/bench/overhead/shunter.yaml" --port "$PORT" --log-level warning) \
  > "$RUN_DIR/ingress-gw.log" 2>&1 &
gw=$!
cleanup() {
  "$HARNESS/lib/stop_tree.sh" "$gw" > /dev/null
  if [ "$started_upstream" = 1 ]; then kill "$(cat "$RUN_DIR/upstream.pid")" 2>/dev/null || true; fi
}
trap cleanup EXIT
for _ in $(seq 100); do
  curl -fsS -o /dev/null "http://127.0.0.1:$PORT/health/readiness" 2>/dev/null && break; sleep 0.2
done
cpu() { python3 "$HARNESS/lib/proctree.py" "$gw" | python3 -c 'import json,sys; print(json.load(sys.stdin)["cpu_s"])'; }
load() { # api seconds
  URL_PATH=${PATHS[$1]} BODY=${BODIES[$1]} timeout $(($2 + 20)) taskset -c 0 \
    wrk -t1 -c"$CONNECTIONS" -d"${2}s" --timeout 10s -s "$root/bench/overhead/post.lua" \
    "http://127.0.0.1:$PORT" | sed -n 's/^JSONRESULT //p'
}
for api in $APIS; do  # sanity and warm-up
  code=$(curl -s -o /dev/null -w '%{http_code}' -H 'content-type: application/json' \
    -H 'authorization: Bearer sk-bench' -d "${BODIES[$api]}" "http://127.0.0.1:$PORT${PATHS[$api]}")
  [ "$code" = 200 ] || { echo "$api answered $code"; exit 1; }
  load "$api" 3 > /dev/null
done
echo "| round | api | req/s | gw CPU ms/req | p50 ms | p99 ms | non-200 |"
echo "|---|---|---|---|---|---|---|"
for round in $(seq "$ROUNDS"); do
  for api in $APIS; do
    before=$(cpu); result=$(load "$api" "$DURATION"); after=$(cpu)
    python3 - "$round" "$api" "$before" "$after" "$result" <<'PY'
import json, sys
round_, api, before, after, result = sys.argv[1:]
r = json.loads(result)
ms = (float(after) - float(before)) * 1000 / max(1, r["requests"])
print(f"| {round_} | {api} | {r['rps']:.0f} | {ms:.3f} | {r['lat_p50_ms']:.2f} | {r['lat_p99_ms']:.2f} | {r['non_200']} |")
PY
  done
done
