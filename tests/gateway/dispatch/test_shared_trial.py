"""One half-open trial for all workers: `serve --workers 2` on a real redis-server, in front
of a loopback upstream that fails every request, lets one client request through per
cooldown in all (not one per worker): the failing upstream never sees two requests closer
together than a cooldown allows."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.fault_upstream import FaultUpstream
from tests.redis_server import RedisServer

COOLDOWN_S = 2.0
BURST = 12  # requests per round, each on a connection of its own (spread over the workers)
ROUNDS = 3
MASTER = "sk-master-trial"  # the session's redis-server may hold other tests' keys


@pytest.fixture(scope="module")
def upstream() -> Iterator[FaultUpstream]:
    with FaultUpstream() as up:
        up.default_fault = "500"
        yield up


@pytest.fixture(scope="module")
def workers(
    redis_server: RedisServer, upstream: FaultUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("shared_trial")
    (folder / "config.yaml").write_text(
        "deployments:\n"
        f"  - {{name: dead, backend: openai, base_url: '{upstream.url}', model: x}}\n"
        "models:\n  m: {candidates: [dead]}\n"
        f"reliability: {{failure_threshold: 1, cooldown_s: {COOLDOWN_S}, "
        f"max_cooldown_s: {COOLDOWN_S}, retries: 0, probe_interval_s: null}}\n"
    )
    env = {"SHUNTER_REDIS_URL": redis_server.url, "SHUNTER_MASTER_KEY": MASTER}
    server = start_server(
        folder / "config.yaml", folder / "w.log", env=env, args=["--workers", "2"]
    )
    yield server
    stop_server(server)


def _burst(server: Server) -> list[int]:
    def one(_: int) -> int:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        key = {"authorization": f"Bearer {MASTER}"}
        with httpx.Client(timeout=30, headers=key) as client:  # a new connection each time
            return client.post(f"{server.api}/chat/completions", json=body).status_code

    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(one, range(BURST)))


def _pids(server: Server) -> set[int]:
    pids = set()
    for _ in range(20):
        with httpx.Client(timeout=10) as client:
            pids.add(client.get(f"{server.base_url}/health/readiness").json()["pid"])
    return pids


def test_a_dead_upstream_costs_one_request_per_cooldown_in_all(
    workers: Server, upstream: FaultUpstream
) -> None:
    assert len(_pids(workers)) == 2  # new connections reach both workers
    _burst(workers)  # the first failures open the breakers
    time.sleep(1.5)  # every worker has seen the opening by now
    first = len(upstream.requests)
    for _ in range(ROUNDS):
        time.sleep(COOLDOWN_S + 0.5)  # the cooldown is over in every worker
        statuses = _burst(workers)
        assert statuses.count(503) >= BURST - 2  # the rest were refused: cooling down
    arrivals = [request.at for request in upstream.requests[first:]]
    assert len(arrivals) >= ROUNDS  # each round's trial
    # one trial per cooldown in all: a worker never tries while another's trial holds
    # (without sharing, both workers try as each round begins)
    gaps = [later - earlier for earlier, later in itertools.pairwise(arrivals)]
    assert min(gaps) >= COOLDOWN_S / 2, gaps
