"""``/v1/responses`` with the official openai SDK against a real `shunter serve` (the tiny
GGUF through llama.cpp), keys and stored responses in a real redis-server."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from gateway.admission.keys import KeyRing
from gateway.state.redis import RedisStateStore
from tests.conftest import Server, start_server, stop_server
from tests.redis_server import RedisServer, start_redis

WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}
# a schema the grammar finishes: the answer completes (the tiny model never stops by itself)
YES_NO: Any = {
    "format": {
        "type": "json_schema",
        "name": "verdict",
        "schema": {
            "type": "object",
            "properties": {"ok": {"type": "string", "enum": ["yes", "no"]}},
            "required": ["ok"],
            "additionalProperties": False,
        },
        "strict": True,
    }
}


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
def server(
    tiny_model: Path, redis: RedisServer, keys: Keys, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("responses")
    (folder / "config.yaml").write_text(
        "deployments:\n"
        f"  - {{name: gen, backend: llamacpp, model: {tiny_model}, n_ctx: 2048, threads: 1,"
        " parallel: 2}\n"
        "models:\n"
        "  tiny: {candidates: [gen]}\n"
        "responses: {ttl_s: 600, max_bytes: 1MiB}\n"
    )
    env = {"SHUNTER_REDIS_URL": redis.url}
    server = start_server(folder / "config.yaml", folder / "server.log", env=env)
    yield server
    stop_server(server)


@pytest.fixture(scope="module")
def alice(server: Server, keys: Keys) -> Iterator[OpenAI]:
    with OpenAI(base_url=server.api, api_key=keys.alice, max_retries=0, timeout=120) as sdk:
        yield sdk


@pytest.fixture(scope="module")
def bob(server: Server, keys: Keys) -> Iterator[OpenAI]:
    with OpenAI(base_url=server.api, api_key=keys.bob, max_retries=0, timeout=120) as sdk:
        yield sdk


def test_create_reports_the_output_limit_and_usage(alice: OpenAI) -> None:
    raw = alice.responses.with_raw_response.create(
        model="tiny", input="Say hello", instructions="Be brief.", max_output_tokens=8
    )
    response = raw.parse()
    assert raw.headers["x-shunter-deployment"] == "gen"
    assert response.object == "response" and response.id.startswith("resp_")
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert [item.type for item in response.output] == ["message"]
    assert response.output_text
    assert response.usage is not None
    assert response.usage.output_tokens >= 8 and response.usage.input_tokens > 0
    assert response.instructions == "Be brief." and response.max_output_tokens == 8


def test_stream_ends_with_completed_and_the_final_response(alice: OpenAI) -> None:
    with alice.responses.stream(model="tiny", input="Is it?", text=YES_NO, temperature=0) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert "response.output_text.delta" in kinds
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert final.status == "completed"
    assert final.output_text.replace(" ", "") in ('{"ok":"yes"}', '{"ok":"no"}')
    assert final.usage is not None and final.usage.output_tokens > 0


@pytest.mark.parametrize("stream", [False, True])
def test_a_required_tool_is_called(alice: OpenAI, stream: bool) -> None:
    args: dict[str, Any] = {
        "model": "tiny",
        "input": "Weather in Paris?",
        "tools": [WEATHER],
        "tool_choice": "required",
        "temperature": 0,
        "max_output_tokens": 100,
    }
    if stream:
        with alice.responses.stream(**args) as events:
            kinds = [event.type for event in events]
            response = events.get_final_response()
        assert "response.function_call_arguments.delta" in kinds
        assert "response.function_call_arguments.done" in kinds
    else:
        response = alice.responses.create(**args)
    calls = [item for item in response.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather" and calls[0].call_id
    assert calls[0].arguments.replace(" ", "") in ('{"city":"Paris"}', '{"city":"Oslo"}')
    assert response.status == "completed"


def test_a_conversation_continues_from_the_stored_response(alice: OpenAI) -> None:
    first = alice.responses.create(
        model="tiny",
        input="What is the weather?",
        tools=[WEATHER],
        tool_choice="required",
        temperature=0,
    )
    call = next(item for item in first.output if item.type == "function_call")
    second = alice.responses.create(
        model="tiny",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "Sunny"}],
        max_output_tokens=4,
    )
    assert second.previous_response_id == first.id
    assert second.usage is not None
    alone = alice.responses.create(  # (an output without its call is refused, as OpenAI does)
        model="tiny", input=[{"role": "user", "content": "Sunny"}], max_output_tokens=4
    )
    # the continued prompt also holds the first turn: its question and the model's call
    assert alone.usage is not None and alone.usage.input_tokens + 10 < second.usage.input_tokens
    items = alice.responses.input_items.list(second.id)
    assert [item.type for item in items.data] == ["function_call_output"]


def test_stored_responses_belong_to_their_key(alice: OpenAI, bob: OpenAI) -> None:
    created = alice.responses.create(model="tiny", input="hi", max_output_tokens=4)
    assert alice.responses.retrieve(created.id).output_text == created.output_text
    with pytest.raises(openai.NotFoundError):
        bob.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        bob.responses.create(
            model="tiny", input="go on", previous_response_id=created.id, max_output_tokens=4
        )
    with pytest.raises(openai.NotFoundError):
        bob.responses.delete(created.id)
    alice.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        alice.responses.retrieve(created.id)


def test_store_false_keeps_nothing(alice: OpenAI) -> None:
    created = alice.responses.create(model="tiny", input="hi", max_output_tokens=4, store=False)
    assert created.store is False
    with pytest.raises(openai.NotFoundError):
        alice.responses.retrieve(created.id)


def test_requests_it_cannot_serve_are_400s_naming_the_field(server: Server, keys: Keys) -> None:
    headers = {"authorization": f"Bearer {keys.alice}"}
    cases = [
        ({"input": "x", "background": True}, "background"),
        ({"input": "x", "top_logprobs": 2}, "top_logprobs"),
        ({"input": "x", "prompt": {"id": "pmpt_1"}}, "prompt"),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file"}]}]},
            "input[0].content[0].file_data",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_video"}]}]},
            "input[0].content[0].type",
        ),
        ({"input": "x", "temperature": 3}, "temperature"),
    ]
    for body, param in cases:
        answer = httpx.post(
            f"{server.api}/responses", json={"model": "tiny", **body}, headers=headers, timeout=30
        )
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["param"] == param
    anonymous = httpx.post(f"{server.api}/responses", json={"model": "tiny", "input": "x"})
    assert anonymous.status_code == 401
