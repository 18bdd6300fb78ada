"""The real `shunter serve` process driven by the real openai SDK over loopback."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import openai
import pytest
from openai import AsyncOpenAI, OpenAI

from tests.conftest import Server

MODEL = "tiny"
HELLO = [{"role": "user", "content": "Say hello"}]


@pytest.fixture
def client(server: Server) -> Iterator[OpenAI]:
    with OpenAI(base_url=server.api, api_key="sk-test", max_retries=0) as sdk:
        yield sdk


@pytest.fixture
async def aclient(server: Server) -> AsyncIterator[AsyncOpenAI]:
    async with AsyncOpenAI(base_url=server.api, api_key="sk-test", max_retries=0) as sdk:
        yield sdk


def test_models_list_and_retrieve(client: OpenAI) -> None:
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError) as info:
        client.models.retrieve("no-such-model")
    assert info.value.code == "model_not_found"


def test_chat_non_stream(client: OpenAI) -> None:
    completion = client.chat.completions.create(
        model=MODEL, messages=HELLO, max_tokens=8, temperature=0
    )
    choice = completion.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content
    assert choice.finish_reason == "length"
    assert completion.usage is not None
    assert completion.usage.completion_tokens == 8
    assert completion.usage.prompt_tokens > 3
    assert completion.usage.total_tokens == 8 + completion.usage.prompt_tokens
    assert completion._request_id and completion._request_id.startswith("req_")


def test_stream_equals_non_stream_and_usage_comes_last(client: OpenAI) -> None:
    args = {"model": MODEL, "messages": HELLO, "max_completion_tokens": 24, "temperature": 0}
    whole = client.chat.completions.create(**args)  # type: ignore[call-overload]
    chunks = list(
        client.chat.completions.create(**args, stream=True, stream_options={"include_usage": True})  # type: ignore[call-overload]
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "length" and all(f is None for f in finishes[:-1])
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert all(c.usage is None for c in chunks[:-1])
    assert last.usage.completion_tokens == 24
    assert last.usage.prompt_tokens == whole.usage.prompt_tokens  # type: ignore[union-attr]
    assert last.usage.total_tokens == last.usage.prompt_tokens + 24
    assert len({c.id for c in chunks}) == 1


def test_stream_without_include_usage_has_no_usage_chunk(client: OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=4, stream=True)
    )
    assert all(c.choices for c in chunks)
    assert all(c.usage is None for c in chunks)


def test_stop_sequence_ends_generation(client: OpenAI) -> None:
    base = client.chat.completions.create(
        model=MODEL, messages=HELLO, max_tokens=40, temperature=0
    ).choices[0]
    text = base.message.content or ""
    stop = text[10:12]
    assert len(stop) == 2
    stopped = client.chat.completions.create(
        model=MODEL, messages=HELLO, max_tokens=40, temperature=0, stop=[stop]
    ).choices[0]
    assert stopped.finish_reason == "stop"
    assert stopped.message.content == text[: text.index(stop)]


def test_seed_makes_sampling_repeatable(client: OpenAI) -> None:
    def sample(seed: int) -> str:
        out = client.chat.completions.create(
            model=MODEL, messages=HELLO, max_tokens=24, temperature=1.0, top_p=0.9, seed=seed
        )
        return out.choices[0].message.content or ""

    assert sample(7) == sample(7)
    assert sample(7) != sample(8)


def test_completions_non_stream_and_stream(client: OpenAI) -> None:
    whole = client.completions.create(model=MODEL, prompt="Once upon", max_tokens=12, temperature=0)
    assert whole.object == "text_completion"
    assert whole.usage is not None and whole.usage.completion_tokens == 12
    chunks = list(
        client.completions.create(
            model=MODEL,
            prompt="Once upon",
            max_tokens=12,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 12


def test_json_schema_output_is_valid(client: OpenAI) -> None:
    schema = {
        "type": "object",
        "properties": {
            "answer": {"type": "string", "enum": ["yes", "no"]},
            "sure": {"type": "boolean"},
        },
        "required": ["answer", "sure"],
        "additionalProperties": False,
    }
    out = client.chat.completions.create(
        model=MODEL,
        messages=HELLO,
        max_tokens=200,
        temperature=0.8,
        seed=1,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "reply", "schema": schema, "strict": True},
        },
    )
    data = json.loads(out.choices[0].message.content or "")
    assert data["answer"] in ("yes", "no")
    assert isinstance(data["sure"], bool)
    assert set(data) == {"answer", "sure"}
    assert out.choices[0].finish_reason == "stop"


def test_named_tool_choice_returns_a_valid_call(client: OpenAI) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]}},
                    "required": ["city"],
                    "additionalProperties": False,
                },
            },
        }
    ]
    choice = {"type": "function", "function": {"name": "get_weather"}}
    out = client.chat.completions.create(
        model=MODEL,
        messages=HELLO,
        tools=tools,
        tool_choice=choice,
        max_tokens=100,  # type: ignore[arg-type]
    )
    message = out.choices[0].message
    assert out.choices[0].finish_reason == "tool_calls"
    assert message.tool_calls and message.tool_calls[0].function.name == "get_weather"
    assert json.loads(message.tool_calls[0].function.arguments)["city"] in ("Paris", "Oslo")

    streamed = list(
        client.chat.completions.create(
            model=MODEL,
            messages=HELLO,
            tools=tools,
            tool_choice=choice,
            max_tokens=100,  # type: ignore[arg-type]
            stream=True,
        )
    )
    deltas = [d for c in streamed for d in (c.choices[0].delta.tool_calls or [])]
    assert deltas[0].id and deltas[0].function and deltas[0].function.name == "get_weather"
    arguments = "".join((d.function.arguments or "") for d in deltas if d.function)
    assert json.loads(arguments)["city"] in ("Paris", "Oslo")


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"temperature": 5}, "temperature"),
        ({"n": 2}, "n"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
        ({"top_logprobs": 3}, "top_logprobs"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ],
)
def test_invalid_requests_are_400_with_param(
    client: OpenAI, kwargs: dict[str, object], param: str
) -> None:
    args: dict[str, object] = {"model": MODEL, "messages": HELLO, "max_tokens": 4, **kwargs}
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(**args)  # type: ignore[call-overload]
    assert info.value.status_code == 400
    body = info.value.body
    assert isinstance(body, dict) and body["param"] == param
    assert body["type"] == "invalid_request_error"


def test_logprobs_describe_every_generated_token(client: OpenAI) -> None:
    args: dict[str, Any] = {"model": MODEL, "messages": HELLO, "max_tokens": 12, "seed": 3}
    whole = client.chat.completions.create(**args, logprobs=True, top_logprobs=3)
    choice = whole.choices[0]
    assert choice.logprobs is not None and choice.logprobs.content
    content = choice.logprobs.content
    assert len(content) == whole.usage.completion_tokens if whole.usage else False
    assert b"".join(bytes(t.bytes or []) for t in content).decode() == choice.message.content
    for token in content:
        assert token.logprob <= 0 and len(token.top_logprobs) == 3
        alternatives = [t.logprob for t in token.top_logprobs]
        assert alternatives == sorted(alternatives, reverse=True)
        assert token.logprob <= alternatives[0] + 1e-6  # nothing beats the most likely
        assert sum(math.exp(a) for a in alternatives) <= 1 + 1e-6
    plain = client.chat.completions.create(**args)
    assert plain.choices[0].logprobs is None

    streamed = list(
        client.chat.completions.create(**args, logprobs=True, top_logprobs=3, stream=True)
    )
    entries = [
        t
        for c in streamed
        if c.choices and c.choices[0].logprobs
        for t in (c.choices[0].logprobs.content or [])
    ]
    assert [(t.token, round(t.logprob, 4)) for t in entries] == [
        (t.token, round(t.logprob, 4)) for t in content
    ]  # seeded: the same tokens, the same figures as the whole answer


def test_completions_logprobs_in_the_legacy_shape(client: OpenAI) -> None:
    args: dict[str, Any] = {"model": MODEL, "prompt": "once", "max_tokens": 8, "seed": 5}
    whole = client.completions.create(**args, logprobs=2)
    choice = whole.choices[0]
    assert choice.logprobs is not None and choice.logprobs.tokens
    assert "".join(choice.logprobs.tokens) == choice.text
    offsets = choice.logprobs.text_offset or []
    assert offsets[0] == 0 and offsets == sorted(offsets)
    assert all(lp <= 0 for lp in choice.logprobs.token_logprobs or [])
    assert all(1 <= len(top) <= 2 for top in choice.logprobs.top_logprobs or [])

    streamed = list(client.completions.create(**args, logprobs=2, stream=True))
    pieces = [c.choices[0].logprobs for c in streamed if c.choices and c.choices[0].logprobs]
    assert [t for p in pieces for t in p.tokens or []] == choice.logprobs.tokens
    assert [o for p in pieces for o in p.text_offset or []] == offsets

    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(**args, logprobs=2, echo=True)
    assert isinstance(info.value.body, dict) and info.value.body["param"] == "echo"


def test_unknown_model_is_404_model_not_found(client: OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-17", messages=HELLO)
    assert info.value.code == "model_not_found"
    assert info.value.response.headers["x-request-id"]


def test_context_length_exceeded(client: OpenAI) -> None:
    long_prompt = "word " * 5000
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": long_prompt}], max_tokens=4
        )
    assert info.value.code == "context_length_exceeded"


def test_unknown_fields_are_accepted(client: OpenAI) -> None:
    out = client.chat.completions.create(
        model=MODEL, messages=HELLO, max_tokens=2, extra_body={"frobnicate": {"x": 1}}
    )
    assert out.choices[0].message.content is not None


def test_malformed_json_is_400_in_openai_shape(server: Server) -> None:
    response = httpx.post(
        f"{server.api}/chat/completions",
        content=b'{"model": "tiny", "messages": [',
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert "JSON" in error["message"]
    assert response.headers["x-request-id"]


def test_wrong_method_is_405_in_openai_shape(server: Server) -> None:
    response = httpx.get(f"{server.api}/chat/completions")
    assert response.status_code == 405
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}
    assert response.headers["allow"] == "OPTIONS, POST"  # OPTIONS is answered too


def test_oversized_body_is_413_in_openai_shape(server: Server) -> None:
    text = "x" * 11_000_000
    body = b'{"model": "tiny", "messages": [{"role": "user", "content": "%s"}]}' % text.encode()
    response = httpx.post(
        f"{server.api}/chat/completions",
        content=body,
        headers={"content-type": "application/json"},
        timeout=30,
    )
    assert response.status_code == 413
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}
    assert response.headers["x-request-id"]


def test_unknown_route_is_404_in_openai_shape(server: Server) -> None:
    response = httpx.get(f"{server.api}/nothing-here")
    assert response.status_code == 404
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}
    assert response.headers["x-request-id"]


def test_health_endpoints(server: Server) -> None:
    assert httpx.get(f"{server.base_url}/health/liveness").json() == {"status": "ok"}
    ready = httpx.get(f"{server.base_url}/health/readiness")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"


async def test_eight_concurrent_requests_match_their_solo_answers(aclient: AsyncOpenAI) -> None:
    words = ["apple", "zebra", "quantum", "river", "{json}", "12345", "Ωmega", "tea time"]
    prompts = [f"{w} " * (i + 1) for i, w in enumerate(words)]

    async def ask(prompt: str) -> str:
        out = await aclient.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": prompt}],
            max_tokens=16,
            temperature=0,
        )
        return out.choices[0].message.content or ""

    solo = [await ask(p) for p in prompts]
    together = await asyncio.gather(*(ask(p) for p in prompts))
    assert list(together) == solo
    assert len(set(solo)) > 1  # different prompts really produced different answers


async def test_client_disconnect_frees_the_slot(server: Server, aclient: AsyncOpenAI) -> None:
    async def busy_slots() -> int:
        async with httpx.AsyncClient() as http:
            body = (await http.get(f"{server.base_url}/health/readiness")).json()
        return sum(d["slots_busy"] or 0 for d in body["deployments"].values())

    # two long generations fill both slots; dropping them must free both at once
    streams = [
        await aclient.chat.completions.create(
            model=MODEL, messages=HELLO, max_tokens=3500, stream=True
        )
        for _ in range(2)
    ]
    for stream in streams:
        async for _ in stream:
            break
    assert await busy_slots() == 2
    for stream in streams:
        await stream.close()
    deadline = time.monotonic() + 2.0
    while await busy_slots() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert await busy_slots() == 0
    out = await aclient.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=4)
    assert out.usage is not None and out.usage.completion_tokens == 4
