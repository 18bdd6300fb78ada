"""``/v1/conversations`` and ``conversation`` on responses, with the official openai SDK
against two real `shunter serve` replicas sharing a real redis-server, in front of a
scripted chat upstream on loopback: a conversation made on one replica is read and
continued on the other, only with the key that made it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import openai
import pytest
from openai import OpenAI

from gateway.admission.keys import KeyRing
from gateway.state.redis import RedisStateStore
from tests.conftest import Server, start_server, stop_server
from tests.fixtures.scripted_upstream import ScriptedUpstream, Turn
from tests.redis_server import RedisServer, start_redis


@dataclass(frozen=True)
class Keys:
    alice: str
    bob: str


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = start_redis(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def keys(redis: RedisServer) -> Keys:
    async def create() -> Keys:
        store = RedisStateStore.from_url(redis.url, prefix="shunter")
        ring = KeyRing(store)
        try:
            return Keys(alice=(await ring.create("alice"))[0], bob=(await ring.create("bob"))[0])
        finally:
            await store.aclose()

    return asyncio.run(create())


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream(script=[Turn(text="Blue.")]) as server:
        yield server


@pytest.fixture(scope="module")
def replicas(
    upstream: ScriptedUpstream,
    redis: RedisServer,
    keys: Keys,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Server, Server]]:
    folder = tmp_path_factory.mktemp("conversations")
    (folder / "config.yaml").write_text(
        "deployments:\n"
        f"  - {{name: up, backend: openai, base_url: '{upstream.url}', model: scripted}}\n"
        "models:\n"
        "  agent: {candidates: [up]}\n"
    )
    env = {"SHUNTER_REDIS_URL": redis.url}
    one = start_server(folder / "config.yaml", folder / "one.log", env=env)
    two = start_server(folder / "config.yaml", folder / "two.log", env=env)
    yield one, two
    stop_server(one)
    stop_server(two)


def _client(server: Server, key: str) -> OpenAI:
    return OpenAI(base_url=server.api, api_key=key, max_retries=0, timeout=60)


@pytest.fixture
def clients(replicas: tuple[Server, Server], keys: Keys) -> Iterator[tuple[OpenAI, OpenAI]]:
    with _client(replicas[0], keys.alice) as one, _client(replicas[1], keys.alice) as two:
        yield one, two


def test_a_conversation_is_kept_and_shared_between_replicas(
    clients: tuple[OpenAI, OpenAI],
) -> None:
    one, two = clients
    made = one.conversations.create(
        items=[{"type": "message", "role": "user", "content": "Hi."}], metadata={"topic": "x"}
    )
    assert made.id.startswith("conv_") and made.object == "conversation"
    assert two.conversations.retrieve(made.id).metadata == {"topic": "x"}
    updated = two.conversations.update(made.id, metadata={"topic": "y"})
    assert updated.metadata == {"topic": "y"}
    added = two.conversations.items.create(
        made.id, items=[{"type": "message", "role": "user", "content": "More."}]
    )
    assert len(added.data) == 1
    listed: Any = one.conversations.items.list(made.id, order="asc").model_dump()
    assert [item["content"][0]["text"] for item in listed["data"]] == ["Hi.", "More."]
    first = listed["first_id"]
    assert one.conversations.items.retrieve(first, conversation_id=made.id).id == first
    one.conversations.items.delete(first, conversation_id=made.id)
    assert len(two.conversations.items.list(made.id).data) == 1
    assert one.conversations.delete(made.id).deleted
    with pytest.raises(openai.NotFoundError):
        two.conversations.retrieve(made.id)


def test_responses_continue_a_conversation_and_add_their_items(
    clients: tuple[OpenAI, OpenAI], upstream: ScriptedUpstream
) -> None:
    one, two = clients
    made = one.conversations.create(items=[{"role": "user", "content": "Pick a color."}])
    upstream.bodies.clear()
    first = one.responses.create(model="agent", conversation=made.id, input="Which one?")
    assert first.conversation is not None and first.conversation.id == made.id
    second = two.responses.create(model="agent", conversation={"id": made.id}, input="Again?")
    assert second.output_text == "Blue."
    roles = [(m["role"], m["content"]) for m in upstream.bodies[1]["messages"]]
    assert roles == [
        ("user", "Pick a color."),
        ("user", "Which one?"),
        ("assistant", "Blue."),
        ("user", "Again?"),
    ]
    items = one.conversations.items.list(made.id, order="asc").data
    assert [item.type for item in items] == ["message"] * 5


def test_another_key_cannot_see_or_use_a_conversation(
    clients: tuple[OpenAI, OpenAI], replicas: tuple[Server, Server], keys: Keys
) -> None:
    made = clients[0].conversations.create()
    with _client(replicas[1], keys.bob) as bob:
        with pytest.raises(openai.NotFoundError):
            bob.conversations.retrieve(made.id)
        with pytest.raises(openai.NotFoundError) as refused:
            bob.responses.create(model="agent", conversation=made.id, input="hi")
    assert refused.value.param == "conversation"


def test_a_conversation_and_a_previous_response_together_are_refused(
    clients: tuple[OpenAI, OpenAI],
) -> None:
    made = clients[0].conversations.create()
    extra: Any = {"previous_response_id": "resp_x"}
    with pytest.raises(openai.BadRequestError) as refused:
        clients[0].responses.create(
            model="agent", conversation=made.id, input="hi", extra_body=extra
        )
    assert refused.value.param == "conversation"
