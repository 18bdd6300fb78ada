"""What sessions leave in Redis, on a real ``shunter serve`` with a redis-server of its own:
one-off conversations of a key without session limits leave no session keys at all; a key
with a session token cap keeps one session's books per conversation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.fault_upstream import FaultUpstream
from tests.redis_server import RedisServer, start_redis

MASTER = "sk-master-session-state"
CONVERSATIONS = 12


@pytest.fixture(scope="module")
def own_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = start_redis(tmp_path_factory.mktemp("session-state-redis"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def server(own_redis: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("session-state")
    config = folder / "shunter.yaml"
    with FaultUpstream() as upstream:
        config.write_text(
            "deployments:\n"
            f"  - {{name: up, backend: openai, base_url: '{upstream.url}', model: fake,\n"
            "     price: {input_per_1m: 1, output_per_1m: 2}}\n"
            "models:\n  m: {candidates: [up]}\n"
        )
        env = {"SHUNTER_REDIS_URL": own_redis.url, "SHUNTER_MASTER_KEY": MASTER}
        started = start_server(config, Path(folder) / "server.log", env=env)
        try:
            yield started
        finally:
            stop_server(started)


def _session_keys(own_redis: RedisServer) -> list[bytes]:
    with redis.Redis.from_url(own_redis.url) as client:
        return [k for k in client.scan_iter(match="*session*") if b":ui:" not in k]


def _one_offs(server: Server, key: str, tag: str) -> None:
    """Conversations of one turn each, every one a session of its own (derived from its
    first message), and one more under a client-given session id."""
    headers = {"authorization": f"Bearer {key}"}
    with httpx.Client(timeout=30, headers=headers) as client:
        for n in range(CONVERSATIONS):
            body = {"model": "m", "messages": [{"role": "user", "content": f"{tag} task {n}"}]}
            assert client.post(f"{server.api}/chat/completions", json=body).status_code == 200
        given = {**headers, "x-shunter-session": f"{tag}-agent"}
        body = {"model": "m", "messages": [{"role": "user", "content": f"{tag} given"}]}
        reply = client.post(f"{server.api}/chat/completions", json=body, headers=given)
        assert reply.status_code == 200


def test_a_key_without_session_limits_leaves_no_session_state(
    server: Server, own_redis: RedisServer
) -> None:
    key = own_redis.create_key("--name", "plain", "--rpm", "1000")
    _one_offs(server, key, "plain")
    assert _session_keys(own_redis) == []


def test_a_key_with_a_session_cap_keeps_each_sessions_books(
    server: Server, own_redis: RedisServer
) -> None:
    before = set(_session_keys(own_redis))
    key = own_redis.create_key("--name", "capped", "--session-max-tokens", "100000")
    _one_offs(server, key, "capped")
    books = {k for k in set(_session_keys(own_redis)) - before if k.endswith(b":session")}
    assert len(books) == CONVERSATIONS + 1  # one per conversation
    with redis.Redis.from_url(own_redis.url) as client:
        ttls = [client.ttl(k) for k in books]
    assert all(0 < ttl <= 3600 for ttl in ttls)  # each forgotten an hour after its last use
