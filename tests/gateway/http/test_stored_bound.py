"""``responses.max_bytes`` bounds what every gateway on one Redis keeps in all: two real
`shunter serve` processes (and one of them restarted) on a real redis-server, in front of a
scripted chat upstream on loopback, never hold more than the bound between them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.scripted_upstream import ScriptedUpstream, Turn
from tests.redis_server import RedisServer, start_redis

MAX_BYTES = 40_000
PADDING = "p" * 3_000  # each stored response holds about 7 kB (its input twice, and more)


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = start_redis(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("stored_bound")
    with ScriptedUpstream(script=[Turn(text="Noted.")]) as upstream:
        (folder / "config.yaml").write_text(
            "deployments:\n"
            f"  - {{name: up, backend: openai, base_url: '{upstream.url}', model: scripted}}\n"
            "models:\n"
            "  agent: {candidates: [up]}\n"
            f"responses: {{max_bytes: {MAX_BYTES}}}\n"
        )
        yield folder / "config.yaml"


def _stored_bytes(redis: RedisServer) -> int:
    """What the stored responses take in Redis, summed over their keys."""
    total = 0
    for key in _keys(redis, "shunter:shared:responses:*"):
        reply = redis.command("STRLEN", key) or ""
        total += int(reply.strip().lstrip(":") or 0)
    return total


def _keys(redis: RedisServer, pattern: str) -> list[str]:
    reply = (redis.command("KEYS", pattern) or "").split("\r\n")
    return [line for line in reply[1:] if line and not line.startswith("$")]


def _store_some(server: Server, count: int) -> None:
    for i in range(count):
        body = {"model": "agent", "input": f"{i} {PADDING}"}
        answer = httpx.post(f"{server.api}/responses", json=body, timeout=60)
        assert answer.status_code == 200, answer.text
        assert answer.json()["store"] is True


def test_two_gateways_and_a_restart_keep_the_bound_in_all(
    redis: RedisServer, config: Path, tmp_path: Path
) -> None:
    env = {"SHUNTER_REDIS_URL": redis.url}
    servers = [start_server(config, tmp_path / f"serve{i}.log", env=env) for i in range(2)]
    try:
        for _ in range(3):
            for server in servers:
                _store_some(server, 4)
                assert _stored_bytes(redis) <= MAX_BYTES
        stop_server(servers[0])
        servers[0] = start_server(config, tmp_path / "again.log", env=env)
        for server in servers:
            _store_some(server, 6)
            assert _stored_bytes(redis) <= MAX_BYTES
        assert _stored_bytes(redis) > MAX_BYTES // 2  # the bound is used, not emptied
    finally:
        for server in servers:
            stop_server(server)
