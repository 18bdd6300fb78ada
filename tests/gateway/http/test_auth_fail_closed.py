"""Auth never fails open at runtime: a real `shunter serve` keeps its virtual keys in a real
redis-server, which the test empties (FLUSHALL), stops and starts again without persistence
under it. A keyless request must never be served once keys were required."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.admission.keys import KeyRing
from gateway.state.redis import RedisStateStore
from tests.conftest import Server, start_server, stop_server
from tests.fixtures.fault_upstream import FaultUpstream
from tests.redis_server import RedisServer

HELLO = [{"role": "user", "content": "hi"}]
# longer than the gateway's key cache (5 s): whatever it cached has been looked up again
WATCH_S = 7.0


@pytest.fixture(scope="module")
def upstream() -> Iterator[FaultUpstream]:
    with FaultUpstream() as server:
        yield server


def create_key(redis: RedisServer) -> str:
    async def create() -> str:
        store = RedisStateStore.from_url(redis.url, prefix="shunter")
        try:
            return (await KeyRing(store).create("ci"))[0]
        finally:
            await store.aclose()

    return asyncio.run(create())


def start(redis: RedisServer, upstream: FaultUpstream, folder: Path) -> Server:
    config = folder / "shunter.yaml"
    config.write_text(
        "deployments:\n"
        f"  - {{name: a, backend: openai, base_url: '{upstream.url}', model: up}}\n"
        "models:\n  m: {candidates: [a]}\n"
    )
    env = {"SHUNTER_REDIS_URL": redis.url, "SHUNTER_MASTER_KEY": ""}
    return start_server(config, folder / "server.log", env=env)


def chat(server: Server, key: str | None = None) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    body = {"model": "m", "messages": HELLO}
    return httpx.post(f"{server.api}/chat/completions", json=body, headers=headers, timeout=30)


def statuses_for(seconds: float, server: Server, key: str | None = None) -> set[int]:
    """Every status a request got, asking again and again for ``seconds``."""
    seen: set[int] = set()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        seen.add(chat(server, key).status_code)
        time.sleep(0.1)
    return seen


def test_a_gateway_that_started_with_keys_never_serves_without_one(
    own_redis: RedisServer, upstream: FaultUpstream, tmp_path: Path
) -> None:
    secret = create_key(own_redis)
    server = start(own_redis, upstream, tmp_path)
    try:
        assert chat(server).status_code == 401
        assert chat(server, secret).status_code == 200
        assert (own_redis.command("FLUSHALL") or "").startswith("+OK")
        assert statuses_for(WATCH_S, server) == {401}
        assert chat(server, secret).status_code == 401  # its record is gone too

        own_redis.stop()
        down = statuses_for(2.0, server)
        assert down == {401}  # no key at all is never right, store or no store
        unknown = chat(server, "sk-shunter-not-cached")
        assert unknown.status_code == 503
        assert unknown.json()["error"]["code"] == "auth_unavailable"
        assert int(unknown.headers["retry-after"]) >= 1

        own_redis.start()  # empty: it kept nothing
        assert statuses_for(WATCH_S, server) == {401}
    finally:
        stop_server(server)


def test_an_open_gateway_turns_auth_on_for_good_when_a_key_appears(
    own_redis: RedisServer, upstream: FaultUpstream, tmp_path: Path
) -> None:
    server = start(own_redis, upstream, tmp_path)
    try:
        assert chat(server).status_code == 200  # no key anywhere: open, on loopback
        secret = create_key(own_redis)
        deadline = time.monotonic() + 30
        while chat(server).status_code == 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert chat(server).status_code == 401
        assert chat(server, secret).status_code == 200
        assert (own_redis.command("FLUSHALL") or "").startswith("+OK")
        assert statuses_for(WATCH_S, server) == {401}
    finally:
        stop_server(server)
