"""A continuation is capped as one request body is: a stored response or conversation
that, with the new input, is larger than the request size limit is refused with a 400
naming the field, against a real `shunter serve` on a real redis-server, in front of a
scripted chat upstream on loopback."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from gateway.admission.keys import KeyRing
from gateway.state.redis import RedisStateStore
from tests.conftest import Server, start_server, stop_server
from tests.fixtures.scripted_upstream import ScriptedUpstream, Turn
from tests.redis_server import RedisServer, start_redis

HUGE_TEXT = "x" * 10_500_000  # stored history alone beyond the 10 MB request cap


@dataclass(frozen=True)
class Stored:
    secret: str
    response_id: str
    conversation_id: str


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = start_redis(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def stored(redis: RedisServer) -> Stored:
    """A key with a huge stored response and a huge conversation, written straight into
    the store as a long history would have left them."""

    async def create() -> Stored:
        store = RedisStateStore.from_url(redis.url, prefix="shunter")
        try:
            secret, record = await KeyRing(store).create("alice")
            message = {"role": "user", "content": HUGE_TEXT}
            response = {"owner": record.id, "messages": [message]}
            item = {"id": "msg_1", "type": "message", "role": "user", "content": HUGE_TEXT}
            conversation = {
                "id": "conv_huge",
                "owner": record.id,
                "created_at": 1,
                "metadata": {},
                "items": [item],
            }
            await store.shared_set("responses:resp_huge", json.dumps(response), 3600)
            await store.shared_set("conversations:conv_huge", json.dumps(conversation), 3600)
            return Stored(secret, "resp_huge", "conv_huge")
        finally:
            await store.aclose()

    return asyncio.run(create())


@pytest.fixture(scope="module")
def server(
    redis: RedisServer, stored: Stored, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("stored_size")
    with ScriptedUpstream(script=[Turn(text="Blue.")]) as upstream:
        (folder / "config.yaml").write_text(
            "deployments:\n"
            f"  - {{name: up, backend: openai, base_url: '{upstream.url}', model: scripted}}\n"
            "models:\n"
            "  agent: {candidates: [up]}\n"
        )
        started = start_server(
            folder / "config.yaml", folder / "serve.log", env={"SHUNTER_REDIS_URL": redis.url}
        )
        yield started
        stop_server(started)


def _continue(server: Server, secret: str, field: dict[str, str]) -> httpx.Response:
    body = {"model": "agent", "input": "And then?", **field}
    headers = {"authorization": f"Bearer {secret}"}
    return httpx.post(f"{server.api}/responses", json=body, headers=headers, timeout=60)


def test_a_stored_response_beyond_the_body_cap_is_refused(server: Server, stored: Stored) -> None:
    answer = _continue(server, stored.secret, {"previous_response_id": stored.response_id})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == "previous_response_id"
    assert error["type"] == "invalid_request_error"
    assert "size limit" in error["message"]


def test_a_conversation_beyond_the_body_cap_is_refused(server: Server, stored: Stored) -> None:
    answer = _continue(server, stored.secret, {"conversation": stored.conversation_id})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == "conversation"
    assert "size limit" in error["message"]
