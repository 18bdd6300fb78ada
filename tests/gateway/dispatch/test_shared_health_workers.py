"""Shared health across real processes: `serve --workers 2` on a real redis-server, in front
of loopback upstreams that hang or flap. What is counted is the client requests that reach
the bad upstream: none from a worker that starts again, or from a replica that starts,
while the fleet holds the breaker open; at most one per down phase of a flapping upstream
in the whole fleet (its failures open every worker's breaker together)."""

from __future__ import annotations

import itertools
import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.fault_upstream import FaultUpstream
from tests.redis_server import RedisServer

MASTER = "sk-master-shared-health"  # the session's redis-server may hold other tests' keys
BURST = 10
_serial = itertools.count()


def _config(folder: Path, upstream: FaultUpstream, reliability: str, name: str) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(
        "deployments:\n"
        f"  - {{name: {name}, backend: openai, base_url: '{upstream.url}', model: x,\n"
        "     timeouts: {first_token_s: 1, total_s: 3}}\n"
        f"models:\n  m: {{candidates: [{name}]}}\n"
        f"reliability: {reliability}\n"
    )
    return path


def _serve(config: Path, redis_server: RedisServer, prefix: str) -> Server:
    env = {
        "SHUNTER_REDIS_URL": redis_server.url,
        "SHUNTER_MASTER_KEY": MASTER,
        "PYTHONHASHSEED": "0",
    }
    log = config.with_name(f"{prefix}-{next(_serial)}.log")
    return start_server(config, log, env=env, args=["--workers", "2"])


def _ask(server: Server) -> int:
    """One client request, marked so the upstream can tell client requests apart (a retry
    sends the same marker again); on a connection of its own, so the kernel spreads them
    over the workers."""
    body = {"model": "m", "messages": [{"role": "user", "content": f"req-{next(_serial)}"}]}
    with httpx.Client(timeout=30, headers={"authorization": f"Bearer {MASTER}"}) as client:
        return client.post(f"{server.api}/chat/completions", json=body).status_code


def _burst(server: Server) -> list[int]:
    with ThreadPoolExecutor(max_workers=5) as pool:
        return list(pool.map(lambda _: _ask(server), range(BURST)))


def _pids(server: Server) -> set[int]:
    pids = set()
    for _ in range(20):
        with httpx.Client(timeout=10) as client:
            pids.add(client.get(f"{server.base_url}/health/readiness").json()["pid"])
    return pids


def _client_requests(upstream: FaultUpstream, start: int, fault: str | None) -> int:
    """Client requests (not attempts) among the upstream's requests from ``start`` on that
    got ``fault``."""
    marks = {
        r.body["messages"][-1]["content"] for r in upstream.requests[start:] if r.fault == fault
    }
    return len(marks)


@pytest.fixture
def hung(tmp_path: Path) -> Iterator[FaultUpstream]:
    with FaultUpstream() as upstream:
        upstream.default_fault = "hang"
        yield upstream


def test_a_worker_or_replica_that_starts_serves_with_the_fleets_open_breaker(
    redis_server: RedisServer, hung: FaultUpstream, tmp_path: Path
) -> None:
    reliability = (
        "{failure_threshold: 1, retries: 0, cooldown_s: 60, max_cooldown_s: 60, "
        "probe_interval_s: null}"
    )
    config = _config(tmp_path, hung, reliability, f"hung{os.getpid()}x{next(_serial)}")
    fleet = _serve(config, redis_server, "fleet")
    replica = None
    try:
        assert _ask(fleet) == 504  # the upstream hangs: the first request finds out
        time.sleep(0.5)
        reached = len(hung.requests)
        assert set(_burst(fleet)) == {503}  # both workers hold it open (one saw it fail)
        pids = _pids(fleet)
        assert len(pids) == 2
        os.kill(min(pids), signal.SIGKILL)  # the supervisor starts another worker
        deadline = time.monotonic() + 30
        while not _pids(fleet) - pids and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _pids(fleet) - pids, "no worker was started again"
        assert set(_burst(fleet)) == {503}  # at once, the new worker too
        replica = _serve(config, redis_server, "replica")  # another replica joins
        assert set(_burst(replica)) == {503}
        assert len(hung.requests) == reached  # none reached the hanging upstream since
    finally:
        for server in (fleet, replica):
            if server is not None:
                stop_server(server)


def test_a_flapping_upstream_costs_one_client_request_per_down_phase(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    # two failures open a breaker, and one client request makes two attempts: counted in
    # one worker, the other spends a request of its own in every down phase; the cooldown
    # outlasts a down phase by 2 s, so no trial request falls inside one however slow the
    # machine, and an up phase outlasts what is left of it
    reliability = (
        "{failure_threshold: 2, retries: 1, backoff_base_s: 0.05, backoff_max_s: 0.1, "
        "cooldown_s: 5, max_cooldown_s: 5, probe_interval_s: 0.5}"
    )
    with FaultUpstream() as upstream:
        config = _config(tmp_path, upstream, reliability, f"flap{os.getpid()}x{next(_serial)}")
        fleet = _serve(config, redis_server, "flap")
        try:
            down, served = [], []
            for _ in range(3):
                start = len(upstream.requests)
                upstream.default_fault = "500"
                _for(fleet, 3.0)
                down.append(_client_requests(upstream, start, "500"))
                start = len(upstream.requests)
                upstream.default_fault = None
                _for(fleet, 5.0)
                served.append(_client_requests(upstream, start, None))
        finally:
            stop_server(fleet)
    assert all(count > 0 for count in served), served  # it closed again in every up phase
    assert all(count <= 1 for count in down), down
    assert sum(down) >= 1


def _for(server: Server, seconds: float) -> None:
    """One client request after another (each on a new connection) for ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        _ask(server)
        time.sleep(0.1)
