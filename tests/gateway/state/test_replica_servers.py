"""Two `shunter serve` processes on one real redis-server act as one gateway."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.fault_upstream import FaultUpstream
from tests.redis_server import RedisServer

MASTER = "sk-master-test"
HELLO = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def upstream() -> Iterator[FaultUpstream]:
    with FaultUpstream() as up:
        yield up


@pytest.fixture(scope="module")
def replicas(
    redis: RedisServer, upstream: FaultUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Server, Server]]:
    folder = tmp_path_factory.mktemp("replicas")
    config = folder / "shunter.yaml"
    config.write_text(
        "reliability: {retries: 0, failure_threshold: 2, cooldown_s: 20}\n"
        "deployments:\n"
        f"  - {{name: up, backend: openai, base_url: '{upstream.url}/v1', model: x}}\n"
        "models:\n  m: {candidates: [up]}\n"
    )
    env = {"SHUNTER_REDIS_URL": redis.url, "SHUNTER_MASTER_KEY": MASTER}
    first = start_server(config, folder / "first.log", env=env)
    second = start_server(config, folder / "second.log", env=env)
    yield first, second
    stop_server(first)
    stop_server(second)


def chat(server: Server, key: str) -> httpx.Response:
    return httpx.post(
        f"{server.api}/chat/completions",
        json={"model": "m", "messages": HELLO},
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    )


def test_a_key_rpm_limit_is_shared_exactly(
    redis: RedisServer, replicas: tuple[Server, Server]
) -> None:
    key = redis.create_key("--name", "shared", "--rpm", "4")
    statuses = [chat(replicas[i % 2], key) for i in range(8)]
    codes = [r.status_code for r in statuses]
    assert codes.count(200) == 4 and codes.count(429) == 4
    limited = next(r for r in statuses if r.status_code == 429)
    assert int(limited.headers["retry-after"]) >= 1
    ok = next(r for r in statuses if r.status_code == 200)
    assert ok.headers["x-ratelimit-limit-requests"] == "4"


def test_unknown_key_is_401_and_model_outside_the_key_is_403(
    redis: RedisServer, replicas: tuple[Server, Server]
) -> None:
    assert chat(replicas[0], "sk-shunter-not-a-key").status_code == 401
    key = redis.create_key("--name", "narrow", "--models", "other")
    denied = chat(replicas[1], key)
    assert denied.status_code == 403
    assert set(denied.json()["error"]) == {"message", "type", "param", "code"}


def test_a_breaker_opened_on_one_replica_opens_on_the_other(
    upstream: FaultUpstream, replicas: tuple[Server, Server]
) -> None:
    first, second = replicas
    upstream.default_fault = "500"
    try:
        assert chat(first, MASTER).status_code == 502
        assert chat(first, MASTER).status_code == 502  # second failure opens the breaker
        time.sleep(2.5)  # each replica publishes, then the other reads, once a second
        seen = len(upstream.requests)
        response = chat(second, MASTER)
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "deployments_cooling_down"
        assert len(upstream.requests) == seen  # the second replica never tried the upstream
    finally:
        upstream.default_fault = None
