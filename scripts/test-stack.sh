#!/usr/bin/env bash
# The stack for real: docker-compose.yml built and brought up on this machine's Docker
# engine, asked the README's question, its Redis restarted; then shared state on a real
# Redis Cluster that loses a primary under load (tests/gateway/state/test_cluster_failover.py).
# docs/stack.md says what each step checks. Needs root (apt-get, dockerd) or a running
# Docker engine; ports 127.0.0.1:8000, :9090 and :3000 free. Arguments go to the cluster
# test's pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh >/dev/null
PROJECT=shunter-stack-test
LOGS=$(mktemp -d /tmp/shunter-stack.XXXXXX)
STARTED_DOCKERD=""
step() { printf '\n== %s\n' "$*"; }
fail() { echo "FAILED: $*" >&2; exit 1; }

# -- tools: a Docker engine and Compose (Debian's packages when they are missing) ---------
need_packages=()
command -v dockerd >/dev/null || need_packages+=(docker.io)
docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null ||
  need_packages+=(docker-compose)
command -v redis-server >/dev/null || need_packages+=(redis-server)
if [ ${#need_packages[@]} -gt 0 ]; then
  step "installing ${need_packages[*]} (apt-get)"
  apt-get update -qq && apt-get install -y -qq "${need_packages[@]}" >/dev/null
fi
if docker compose version >/dev/null 2>&1; then COMPOSE=(docker compose); else COMPOSE=(docker-compose); fi
# without the buildx plugin, the classic builder (it needs no frontend image from a registry)
docker buildx version >/dev/null 2>&1 || export DOCKER_BUILDKIT=0

cleanup() {
  local status=$?
  if [ -n "${COMPOSE_UP:-}" ]; then
    "${COMPOSE[@]}" -p "$PROJECT" logs --no-color >"$LOGS/compose.log" 2>&1 || true
    "${COMPOSE[@]}" -p "$PROJECT" down -v --remove-orphans >/dev/null 2>&1 || true
  fi
  if [ -n "$STARTED_DOCKERD" ]; then
    kill "$STARTED_DOCKERD" 2>/dev/null && wait "$STARTED_DOCKERD" 2>/dev/null || true
  fi
  [ $status -eq 0 ] || echo "logs: $LOGS" >&2
  exit $status
}
trap cleanup EXIT

# -- the engine: the running one, or our own dockerd (own data root, kept for its cache) ----
if ! docker info >/dev/null 2>&1; then
  root=${SHUNTER_DOCKER_ROOT:-/var/lib/shunter-docker}
  mkdir -p "$root" /run/shunter-docker
  export DOCKER_HOST=unix:///run/shunter-docker/docker.sock
  dockerd --data-root "$root" --exec-root /run/shunter-docker/exec \
    --pidfile /run/shunter-docker/dockerd.pid -H "$DOCKER_HOST" >"$LOGS/dockerd.log" 2>&1 &
  STARTED_DOCKERD=$!
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || fail "dockerd did not start (see $LOGS/dockerd.log)"
  echo "started dockerd (pid $STARTED_DOCKERD, data root $root)"
fi
echo "engine $(docker version --format '{{.Server.Version}}'), compose: ${COMPOSE[*]} ($("${COMPOSE[@]}" version --short 2>/dev/null || true))"

step "base images"
./scripts/stack/stand-ins.sh

# -- the stack --------------------------------------------------------------------------------
export SHUNTER_MASTER_KEY="sk-stack-$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')"
compose() { "${COMPOSE[@]}" -p "$PROJECT" "$@"; }
for port in 8000 9090 3000; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    fail "127.0.0.1:$port is in use; the stack publishes it (stop what listens there)"
  fi
done

step "build (the first build compiles llama.cpp: many minutes on two cores)"
built=$SECONDS
compose build >"$LOGS/build.log" 2>&1 || { tail -30 "$LOGS/build.log"; fail "compose build"; }
echo "built in $((SECONDS - built)) s; image shunter:cpu is" \
  "$(docker image inspect shunter:cpu --format '{{.Size}}' | awk '{printf "%.0f MB", $1 / 1e6}')"
user=$(docker image inspect shunter:cpu --format '{{.Config.User}}')
[ -n "$user" ] && [ "$user" != root ] && [ "$user" != 0 ] || fail "the image runs as root"
docker image inspect shunter:cpu --format '{{json .Config.Healthcheck.Test}}' | grep -q readiness ||
  fail "the image has no readiness healthcheck"
echo "runs as user $user, with a HEALTHCHECK on /health/readiness"

step "up -d (default profile)"
up_at=$(date +%s.%N)
COMPOSE_UP=1
compose up -d >"$LOGS/up.log" 2>&1 || { cat "$LOGS/up.log"; fail "compose up"; }
.venv/bin/python scripts/stack/check_stack.py wait-healthy "$PROJECT" "$up_at"

step "the README's question through 127.0.0.1:8000"
.venv/bin/python scripts/stack/check_stack.py ask "$up_at"

step "a virtual key made with the CLI in the gateway container, a stored response"
secret=$(compose exec -T gateway shunter keys create --name stack --rpm 60 --budget 1 2>/dev/null | tail -1)
[[ "$secret" == sk-shunter-* ]] || fail "shunter keys create printed no key"
.venv/bin/python scripts/stack/check_stack.py store "$secret" >"$LOGS/stored"
cat "$LOGS/stored"

step "restart redis"
compose restart redis >/dev/null 2>&1
.venv/bin/python scripts/stack/check_stack.py wait-healthy "$PROJECT" "$(date +%s.%N)"
compose exec -T gateway shunter keys list | grep -q "name=stack" || fail "the key is gone"
.venv/bin/python scripts/stack/check_stack.py survived "$secret" "$(head -1 "$LOGS/stored" | cut -d' ' -f3)"

step "observability and the GPU profile"
.venv/bin/python scripts/stack/check_stack.py scraped
batches=$(compose logs otel-collector 2>/dev/null | grep -c "otlp traces" || true)
[ "$batches" -gt 0 ] || fail "no trace reached the collector over OTLP"
echo "the collector received $batches trace batches from the gateway over OTLP/HTTP"
running=$(compose ps --services --filter status=running 2>/dev/null || compose ps --services)
echo "$running" | grep -qx gateway-gpu && fail "the GPU gateway runs without --profile gpu"
compose --profile gpu config --services | grep -qx gateway-gpu || fail "no gateway-gpu in --profile gpu"
echo "gateway-gpu: only with --profile gpu (not started: $(echo "$running" | sort | tr '\n' ' '))"

step "down -v"
compose down -v --remove-orphans >/dev/null 2>&1
COMPOSE_UP=""
echo "removed the containers, the network and the volumes"

step "Redis Cluster: three primaries, three replicas; a primary killed under load"
SHUNTER_STACK=1 .venv/bin/pytest -q -p no:randomly -s tests/gateway/state/test_cluster_failover.py "$@"
