"""A gemini deployment through the real gateway: ``shunter serve`` in front of a recording
Gemini upstream on loopback, driven by the openai SDK (chat whole and streamed, a tool
call round trip that must give Gemini its thought signature back, usage and cost, errors),
and the backend itself for what only a Gemini client sends (native requests)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from anthropic import Anthropic
from openai import OpenAI

from backends.gemini import GeminiBackend, GeminiSettings
from backends.gemini.calls import split
from gateway.errors import StreamCutError, UpstreamError
from gateway.protocol import ChatCompletionRequest
from tests.backends.gemini.schema import problems
from tests.conftest import Server, start_server, stop_server
from tests.fixtures.gemini_upstream import SIGNATURE, GeminiUpstream

KEY = "AIzaSyTestKey0000000000000000000000000"
WEATHER: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
HI: Any = [{"role": "user", "content": "Weather in Paris?"}]
FAILING = (
    "rate-limited",
    "bad-key",
    "too-long",
    "forbidden",
    "missing",
    "broken",
    "unavailable",
    "deadline",
    "cut",
)


@pytest.fixture(scope="module")
def upstream() -> Iterator[GeminiUpstream]:
    with GeminiUpstream() as server:
        yield server


@pytest.fixture(scope="module")
def server(upstream: GeminiUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("gemini")
    wire = f"backend: gemini, base_url: '{upstream.url}', api_key_env: GEM_KEY"
    price = "price: {input_per_1m: 2, output_per_1m: 12}"
    lines = [
        "reliability: {retries: 0}",
        "deployments:",
        f"  - {{name: gem, {wire}, model: gemini-3-pro-preview, {price}}}",
        f"  - {{name: thinker, {wire}, model: gemini-2.5-flash, include_thoughts: true}}",
        *(f"  - {{name: {m}, {wire}, model: {m}}}" for m in FAILING),
        "models:",
        "  gem: {candidates: [gem]}",
        "  thinker: {candidates: [thinker]}",
        "  resumed: {candidates: [cut, gem], policy: [first]}",
        *(f"  {m}: {{candidates: [{m}], fallback: false}}" for m in FAILING),
    ]
    (folder / "config.yaml").write_text("\n".join(lines) + "\n")
    started = start_server(folder / "config.yaml", folder / "server.log", env={"GEM_KEY": KEY})
    yield started
    stop_server(started)


@pytest.fixture(scope="module")
def client(server: Server) -> Iterator[OpenAI]:
    with OpenAI(base_url=server.api, api_key="unused", max_retries=0, timeout=60) as sdk:
        yield sdk


def test_a_chat_request_is_answered_through_generate_content(
    client: OpenAI, upstream: GeminiUpstream
) -> None:
    reply = client.chat.completions.create(
        model="gem",
        messages=[{"role": "system", "content": "Be brief."}, *HI],
        max_tokens=20,
        temperature=0.3,
    )
    assert reply.choices[0].message.content == "Hello from Gemini"
    assert reply.choices[0].finish_reason == "stop"
    assert reply.model == "gemini-3-pro-preview"  # the deployment's model answered
    assert reply.usage is not None
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (11, 12)
    assert reply.usage.prompt_tokens_details is not None
    assert reply.usage.prompt_tokens_details.cached_tokens == 3
    assert reply.usage.completion_tokens_details is not None
    assert reply.usage.completion_tokens_details.reasoning_tokens == 5
    seen = upstream.last()
    assert seen.path == "/v1beta/models/gemini-3-pro-preview:generateContent"
    assert seen.headers["x-goog-api-key"] == KEY and "authorization" not in seen.headers
    assert seen.body == {
        "contents": [{"role": "user", "parts": [{"text": "Weather in Paris?"}]}],
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "generationConfig": {"temperature": 0.3, "maxOutputTokens": 20},
    }
    assert problems(seen.body) == []


def test_a_stream_arrives_in_chunks_with_thoughts_and_usage(
    client: OpenAI, upstream: GeminiUpstream
) -> None:
    stream = client.chat.completions.create(
        model="thinker",
        messages=HI,
        stream=True,
        stream_options={"include_usage": True},
        reasoning_effort="low",
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    thoughts = "".join(
        getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks if c.choices
    )
    assert text == "Hello from Gemini" and thoughts == "Let me think."
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop" and set(finishes[:-1]) == {None}
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 23
    seen = upstream.last("streamGenerateContent")
    assert seen.path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    thinking = seen.body["generationConfig"]["thinkingConfig"]
    assert thinking == {"includeThoughts": True, "thinkingBudget": 1024}
    assert problems(seen.body) == []


def test_a_tool_round_trip_gives_gemini_its_thought_signature_back(
    client: OpenAI, upstream: GeminiUpstream
) -> None:
    stream = client.chat.completions.create(model="gem", messages=HI, tools=[WEATHER], stream=True)
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for chunk in stream:
        for delta in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
            entry = calls.setdefault(delta.index, {"arguments": ""})
            if delta.id:
                entry["id"], entry["name"] = delta.id, delta.function.name or ""  # type: ignore[union-attr]
            entry["arguments"] += (delta.function and delta.function.arguments) or ""
        finish = (chunk.choices and chunk.choices[0].finish_reason) or finish
    assert finish == "tool_calls" and len(calls) == 2
    assert split(calls[0]["id"]) == ("fc_1", SIGNATURE) and calls[1]["id"] == "fc_2"
    assert re.fullmatch(r"[A-Za-z0-9_-]+", calls[0]["id"])  # a valid Messages tool_use id too
    assistant: Any = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for c in calls.values()
        ],
    }
    results: Any = [
        {"role": "tool", "tool_call_id": calls[0]["id"], "content": '{"temp_c": 21}'},
        {"role": "tool", "tool_call_id": calls[1]["id"], "content": "4 degrees"},
    ]
    reply = client.chat.completions.create(
        model="gem", messages=[*HI, assistant, *results], tools=[WEATHER]
    )
    assert reply.choices[0].message.content == 'The tool said: {"temp_c": 21}'
    seen = upstream.last()
    model_turn, answers = seen.body["contents"][1], seen.body["contents"][2]
    assert model_turn["parts"][0]["thoughtSignature"] == SIGNATURE
    assert f'"thoughtSignature":"{SIGNATURE}"'.encode() in seen.raw  # byte for byte
    assert "thoughtSignature" not in model_turn["parts"][1]  # Gemini signed only the first
    assert [p["functionCall"]["id"] for p in model_turn["parts"]] == ["fc_1", "fc_2"]
    assert [p["functionResponse"] for p in answers["parts"]] == [
        {"name": "get_weather", "response": {"temp_c": 21}, "id": "fc_1"},
        {"name": "get_weather", "response": {"output": "4 degrees"}, "id": "fc_2"},
    ]
    assert problems(seen.body) == []


def test_the_signature_survives_a_responses_client(
    client: OpenAI, upstream: GeminiUpstream
) -> None:
    tool: Any = {
        "type": "function",
        "name": "get_weather",
        "parameters": WEATHER["function"]["parameters"],
    }
    first = client.responses.create(model="gem", input="Weather in Paris?", tools=[tool])
    made = [item for item in first.output if item.type == "function_call"]
    assert [split(item.call_id) for item in made] == [("fc_1", SIGNATURE), ("fc_2", None)]
    answers: Any = [
        {"type": "function_call_output", "call_id": item.call_id, "output": "sunny"}
        for item in made
    ]
    given: Any = [
        {"role": "user", "content": "Weather in Paris?"},
        *(item.model_dump(exclude_none=True) for item in made),
        *answers,
    ]
    second = client.responses.create(model="gem", input=given, tools=[tool])
    assert second.output_text == 'The tool said: {"output": "sunny"}'
    parts = upstream.last().body["contents"][1]["parts"]
    assert parts[0]["thoughtSignature"] == SIGNATURE and "thoughtSignature" not in parts[1]


def test_the_signature_survives_a_messages_client(server: Server, upstream: GeminiUpstream) -> None:
    tool: Any = {"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}
    with Anthropic(base_url=server.base_url, api_key="unused", max_retries=0) as sdk:
        first = sdk.messages.create(model="gem", max_tokens=64, messages=HI, tools=[tool])
        uses = [block for block in first.content if block.type == "tool_use"]
        assert first.stop_reason == "tool_use" and split(uses[0].id) == ("fc_1", SIGNATURE)
        results: Any = [
            {"type": "tool_result", "tool_use_id": block.id, "content": "sunny"} for block in uses
        ]
        turns: Any = [
            *HI,
            {
                "role": "assistant",
                "content": [b.model_dump(exclude_none=True) for b in first.content],
            },
            {"role": "user", "content": results},
        ]
        second = sdk.messages.create(model="gem", max_tokens=64, messages=turns, tools=[tool])
        counted = sdk.messages.count_tokens(model="gem", messages=turns, tools=[tool])
    assert counted.input_tokens == 42  # Gemini's own countTokens
    assert problems(upstream.last("countTokens").body, "CountTokensRequest") == []
    assert second.content[0].type == "text"
    assert second.content[0].text == 'The tool said: {"output": "sunny"}'
    parts = upstream.last().body["contents"][1]["parts"]
    assert parts[0]["thoughtSignature"] == SIGNATURE
    assert [p["functionCall"]["id"] for p in parts] == ["fc_1", "fc_2"]


def test_a_stream_cut_mid_way_is_resumed_on_a_gemini_deployment(
    client: OpenAI, upstream: GeminiUpstream
) -> None:
    stream = client.chat.completions.create(model="resumed", messages=HI, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "Hello from Gemini"
    seen = upstream.last("streamGenerateContent")
    assert seen.path.startswith("/v1beta/models/gemini-3-pro-preview:")
    assert seen.body["contents"][-1]["role"] == "user"  # no prefill: a user turn continues
    assert "Hello" in json.dumps(seen.body["contents"][-1])


def test_usage_is_priced(client: OpenAI, server: Server) -> None:
    def spent() -> float:
        text = httpx.get(f"{server.base_url}/metrics", timeout=10).text
        found = re.search(r'shunter_cost_usd_total\{[^}]*deployment="gem"[^}]*\} (\S+)', text)
        return float(found.group(1)) if found else 0.0

    before = spent()
    client.chat.completions.create(model="gem", messages=HI)
    assert spent() - before == pytest.approx((11 * 2 + 12 * 12) / 1e6)


@pytest.mark.parametrize(
    ("model", "status", "error_type", "retry_after"),
    [
        ("rate-limited", 429, "rate_limit_error", "37"),
        ("bad-key", 502, "upstream_error", None),
        ("too-long", 400, "invalid_request_error", None),
        ("forbidden", 502, "upstream_error", None),
        ("missing", 404, "invalid_request_error", None),
        ("broken", 502, "upstream_error", None),
        ("unavailable", 502, "upstream_error", None),
        ("deadline", 502, "upstream_error", None),
    ],
)
def test_upstream_errors_map_through_the_table(
    client: OpenAI, model: str, status: int, error_type: str, retry_after: str | None
) -> None:
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model=model, messages=HI)
    error = caught.value
    assert error.status_code == status
    assert error.body["type"] == error_type  # type: ignore[index]
    assert error.response.headers.get("retry-after") == retry_after
    assert KEY not in error.response.text


def test_a_stream_cut_before_its_finish_reason_fails(client: OpenAI) -> None:
    with pytest.raises(openai.APIError):
        list(client.chat.completions.create(model="cut", messages=HI, stream=True))


# --- the backend itself: native requests -------------------------------------------------


@pytest.fixture
async def backend(upstream: GeminiUpstream, monkeypatch: pytest.MonkeyPatch) -> GeminiBackend:
    monkeypatch.setenv("GEM_KEY", KEY)
    settings = GeminiSettings(
        name="gem", backend="gemini", base_url=upstream.url, api_key_env="GEM_KEY", model="gemini-x"
    )
    started = GeminiBackend(settings)
    await started.start()
    return started


NATIVE = (
    b'{ "contents" : [{"parts":[{"text":"hi \\u00e9"}]}],\n'
    b' "generationConfig":{"temperature":1.0E0}}'
)


async def test_a_native_request_goes_up_byte_for_byte(
    backend: GeminiBackend, upstream: GeminiUpstream
) -> None:
    assert backend.capabilities.native_apis == frozenset({"gemini"})
    content, usage = await backend.native("gemini", NATIVE)
    seen = upstream.last()
    assert seen.raw == NATIVE and seen.path == "/v1beta/models/gemini-x:generateContent"
    assert json.loads(content)["candidates"][0]["content"]["parts"] == [
        {"text": "Hello from Gemini"}
    ]
    assert (usage.prompt_tokens, usage.completion_tokens) == (11, 12)
    named = NATIVE.replace(b"{ ", b'{ "model": "models/other", ', 1)
    await backend.native("gemini", named)
    assert upstream.last().raw == NATIVE.replace(b"{ ", b'{ "model": "models/gemini-x", ', 1)
    await backend.aclose()


async def test_a_native_stream_passes_the_events_through(
    backend: GeminiBackend, upstream: GeminiUpstream
) -> None:
    stream = backend.native_stream("gemini", NATIVE)
    got = b"".join([frame async for frame in stream])
    assert upstream.last("streamGenerateContent").raw == NATIVE
    assert got == upstream.streamed[-1].replace(b"\r\n", b"\n")
    assert stream.usage is not None and stream.usage.total_tokens == 23
    await backend.aclose()


async def test_native_token_counts_and_health(
    backend: GeminiBackend, upstream: GeminiUpstream
) -> None:
    assert await backend.count_native_tokens("gemini", NATIVE) == 42
    wrapped = upstream.last("countTokens").body
    assert wrapped["generateContentRequest"]["model"] == "models/gemini-x"
    assert problems(wrapped, "CountTokensRequest") == []
    plain = b'{"contents": [{"parts": [{"text": "hi"}]}]}'
    assert await backend.count_native_tokens("gemini", plain) == 42
    assert upstream.last("countTokens").raw == plain
    chat = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "system", "content": "Be brief."}, *HI]}
    )
    assert await backend.count_tokens(chat) == 42
    counted = upstream.last("countTokens").body["generateContentRequest"]
    assert counted["model"] == "models/gemini-x" and counted["systemInstruction"]
    assert problems(upstream.last("countTokens").body, "CountTokensRequest") == []
    assert await backend.health(5.0) is True
    assert any(r.path == "/v1beta/models/gemini-x" for r in upstream.requests)
    await backend.aclose()


async def test_midstream_errors_and_refusals(
    upstream: GeminiUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GEM_KEY", KEY)
    settings = GeminiSettings(
        name="g",
        backend="gemini",
        base_url=upstream.url,
        api_key_env="GEM_KEY",
        model="midstream-error",
    )
    failing = GeminiBackend(settings)
    await failing.start()
    with pytest.raises(UpstreamError) as caught:
        [frame async for frame in failing.native_stream("gemini", NATIVE)]
    assert caught.value.upstream_status == 500
    with pytest.raises(StreamCutError):
        cut = GeminiBackend(settings.model_copy(update={"model": "cut"}))
        await cut.start()
        [frame async for frame in cut.native_stream("gemini", NATIVE)]
    chat = ChatCompletionRequest.model_validate({"model": "m", "messages": HI})
    got: list[Any] = []
    with pytest.raises(UpstreamError):
        async for chunk in failing.chat_stream(chat):
            got.append(chunk)
    assert got[1].choices[0].delta.content == "Hello "  # what came before the error
    with pytest.raises(Exception, match="native messages"):
        await failing.native("messages", NATIVE)
    await failing.aclose()
