"""`serve --workers N`: N processes on one port act as one gateway through a real Redis."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import Server, free_port, start_server, stop_server
from tests.fixtures.fault_upstream import FaultUpstream
from tests.redis_server import RedisServer

MASTER = "sk-master-test"
HELLO = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def redis(redis_server: RedisServer) -> RedisServer:
    """The session's redis-server (keys here have names of their own)."""
    return redis_server


@pytest.fixture(scope="module")
def upstream() -> Iterator[FaultUpstream]:
    with FaultUpstream() as up:
        yield up


@pytest.fixture(scope="module")
def config(upstream: FaultUpstream, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("workers") / "shunter.yaml"
    path.write_text(
        "deployments:\n"
        f"  - name: up\n    backend: openai\n    base_url: '{upstream.url}/v1'\n    model: x\n"
        "    price: {input_per_1m: 0, output_per_1m: 50000}\n"
        "models:\n  m: {candidates: [up]}\n"
    )
    return path


@pytest.fixture(scope="module")
def workers(
    redis: RedisServer, config: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    env = {"SHUNTER_REDIS_URL": redis.url, "SHUNTER_MASTER_KEY": MASTER}
    log = tmp_path_factory.mktemp("logs") / "workers.log"
    server = start_server(config, log, env=env, args=["--workers", "2"])
    yield server
    stop_server(server)


def answering_pids(server: Server, tries: int = 60, *, lenient: bool = False) -> set[int]:
    """The worker pids that answered readiness, each try on a new connection.
    ``lenient``: a connection the dead worker held (reset) is not a failure."""
    pids = set()
    for _ in range(tries):
        try:
            response = httpx.get(f"{server.base_url}/health/readiness", timeout=10)
        except httpx.TransportError:
            if not lenient:
                raise
            continue
        pids.add(response.json()["pid"])
    return pids


def parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def chat(server: Server, key: str) -> httpx.Response:
    # a new connection each time, so that the kernel spreads them over the workers
    return httpx.post(
        f"{server.api}/chat/completions",
        json={"model": "m", "messages": HELLO},
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    )


def test_both_workers_answer_on_one_port(workers: Server) -> None:
    pids = answering_pids(workers)
    assert len(pids) == 2
    assert workers.process.pid not in pids
    assert {parent_of(pid) for pid in pids} == {workers.process.pid}


def test_a_key_rpm_limit_is_counted_once_across_workers(
    redis: RedisServer, workers: Server
) -> None:
    key = redis.create_key("--name", "rpm", "--rpm", "5")
    codes = [chat(workers, key).status_code for _ in range(12)]
    assert codes == [200] * 5 + [429] * 7


def test_a_budget_is_spent_once_across_workers(redis: RedisServer, workers: Server) -> None:
    key = redis.create_key("--name", "budget", "--budget", "2.5")
    responses = [chat(workers, key) for _ in range(6)]
    codes = [r.status_code for r in responses]
    served = codes.count(200)
    assert codes == [200] * served + [429] * (6 - served)
    # each answer costs its completion tokens at $0.05 each: the budget admits requests
    # while the spend so far is under it, and not one more
    costs = [r.json()["usage"]["completion_tokens"] * 0.05 for r in responses[:served]]
    assert sum(costs[:-1]) < 2.5 <= sum(costs)


def test_every_log_record_of_every_worker_is_a_line_of_its_own(workers: Server) -> None:
    async def burst() -> None:
        limits = httpx.Limits(max_connections=100, max_keepalive_connections=0)
        async with httpx.AsyncClient(timeout=30, limits=limits) as client:
            url = f"{workers.api}/chat/completions"
            body = {"model": "m", "messages": HELLO}
            headers = {"authorization": f"Bearer {MASTER}"}
            await asyncio.gather(
                *(client.post(url, json=body, headers=headers) for _ in range(150))
            )

    asyncio.run(burst())
    lines = [line for line in workers.log().splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]  # two records on one line do not parse
    assert sum(r.get("key_id") == "master" for r in records) >= 150


def test_a_killed_worker_is_replaced(workers: Server) -> None:
    victim = next(iter(answering_pids(workers, tries=5)))
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 60
    pids: set[int] = set()
    while time.monotonic() < deadline:
        pids = answering_pids(workers, tries=20, lenient=True)
        if len(pids) == 2 and victim not in pids:
            break
        time.sleep(0.2)
    assert len(pids) == 2 and victim not in pids
    assert workers.process.poll() is None


def test_sigterm_drains_every_worker_and_exits_0(
    redis: RedisServer, config: Path, tmp_path: Path
) -> None:
    env = {"SHUNTER_REDIS_URL": redis.url, "SHUNTER_MASTER_KEY": MASTER}
    server = start_server(config, tmp_path / "w.log", env=env, args=["--workers", "2"])
    try:
        pids = answering_pids(server)
        server.process.send_signal(signal.SIGTERM)
        # generous: a loaded runner is slow (the parent kills a stuck drain after 45 s)
        assert server.process.wait(timeout=90) == 0, server.log()
        for pid in pids:
            assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()
    finally:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait()


def refused(config: Path, *args: str, env: dict[str, str] | None = None) -> str:
    command = [sys.executable, "-m", "gateway.cli", "serve", "--config", str(config)]
    result = subprocess.run(
        [*command, "--port", str(free_port()), "--workers", "2", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in {**os.environ, **(env or {})}.items() if k != "SHUNTER_REDIS_URL"},
    )
    assert result.returncode == 2, result.stderr
    return result.stderr


def test_more_than_one_worker_needs_redis(config: Path) -> None:
    assert "--redis-url" in refused(config)


def test_more_than_one_worker_refuses_in_process_engines(
    redis: RedisServer, tiny_model: Path, tmp_path: Path
) -> None:
    config = tmp_path / "local.yaml"
    config.write_text(
        f"deployments:\n  - {{name: tiny-local, backend: llamacpp, model: '{tiny_model}'}}\n"
        "models:\n  tiny: {candidates: [tiny-local]}\n"
    )
    message = refused(config, "--redis-url", redis.url)
    assert "tiny-local" in message and "shunter worker" in message


def test_workers_must_be_a_positive_number_or_auto(config: Path) -> None:
    command = [sys.executable, "-m", "gateway.cli", "serve", "--config", str(config)]
    result = subprocess.run(
        [*command, "--workers", "0"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "a number of workers" in result.stderr
