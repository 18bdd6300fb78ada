"""AnthropicBackend: translation both ways, and HTTP over MockTransport (Anthropic payloads)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from backends.anthropic.backend import AnthropicBackend, AnthropicSettings
from backends.anthropic.wire import from_message, to_messages_request
from backends.base import Backend
from backends.http.errors import counts_as_failure, upstream_status
from gateway.errors import (
    ContextLengthExceededError,
    GatewayError,
    InvalidRequestError,
    RateLimitError,
    ServiceUnavailableError,
    UpstreamError,
    UpstreamTimeoutError,
)
from gateway.protocol import ChatCompletionChunk, ChatCompletionRequest, CompletionRequest

MODEL = "claude-sonnet-4-5"

# --- payloads shaped like docs.claude.com's examples --------------------------------------

TEXT_MESSAGE = {
    "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
    "type": "message",
    "role": "assistant",
    "model": MODEL,
    "content": [{"type": "text", "text": "Hello!"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 12,
        "output_tokens": 6,
        "cache_creation_input_tokens": 5,
        "cache_read_input_tokens": 100,
    },
}
TOOL_USE = {
    "type": "tool_use",
    "id": "toolu_01A09q90qw90lq917835lq9",
    "name": "get_weather",
    "input": {"location": "San Francisco, CA", "unit": "celsius"},
}
TOOL_MESSAGE = {
    **TEXT_MESSAGE,
    "id": "msg_01Aq9w938a90dw8q",
    "content": [{"type": "text", "text": "I'll check the weather."}, TOOL_USE],
    "stop_reason": "tool_use",
    "usage": {"input_tokens": 472, "output_tokens": 89},
}


def event(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, **fields}


def block(index: int, kind: str, **fields: Any) -> dict[str, Any]:
    return event("content_block_start", index=index, content_block={"type": kind, **fields})


def delta(index: int, kind: str, **fields: Any) -> dict[str, Any]:
    return event("content_block_delta", index=index, delta={"type": kind, **fields})


MESSAGE_START = event(
    "message_start",
    message={
        "id": "msg_014p7gG3wDgGV9EUtLvnow3U",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 472, "cache_read_input_tokens": 28, "output_tokens": 2},
    },
)
STREAM_EVENTS = [
    MESSAGE_START,
    block(0, "text", text=""),
    event("ping"),
    delta(0, "text_delta", text="Okay"),
    delta(0, "text_delta", text=", let"),
    event("content_block_stop", index=0),
    block(1, "tool_use", id="toolu_01T1x1fJ34qAmk2tNTrN7Up6", name="get_weather", input={}),
    delta(1, "input_json_delta", partial_json=""),
    delta(1, "input_json_delta", partial_json='{"location":'),
    delta(1, "input_json_delta", partial_json=' "San Francisco, CA"}'),
    event("content_block_stop", index=1),
    block(2, "tool_use", id="toolu_02", name="get_time", input={}),
    delta(2, "input_json_delta", partial_json="{}"),
    event("content_block_stop", index=2),
    event(
        "message_delta",
        delta={"stop_reason": "tool_use", "stop_sequence": None},
        usage={"output_tokens": 89},
    ),
    event("message_stop"),
]


def error_body(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_1"}


class Upstream:
    """A MockTransport that answers with ``answer`` and records requests."""

    def __init__(self, answer: Callable[[httpx.Request], httpx.Response]) -> None:
        self.answer = answer
        self.requests: list[httpx.Request] = []
        self.transport = httpx.MockTransport(self._handle)

    def _handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.answer(request)

    def body(self) -> Any:
        return json.loads(self.requests[-1].content)


def json_answer(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> Any:
    return lambda _: httpx.Response(status, json=payload, headers=headers)


def stream_answer(events: list[dict[str, Any]]) -> Any:
    data = b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)

    async def pieces() -> AsyncIterator[bytes]:  # 7-byte reads: frames split anywhere
        for i in range(0, len(data), 7):
            yield data[i : i + 7]

    headers = {"content-type": "text/event-stream"}
    return lambda _: httpx.Response(200, headers=headers, content=pieces())


async def started(upstream: Upstream, monkeypatch: pytest.MonkeyPatch) -> AnthropicBackend:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    settings = AnthropicSettings(backend="anthropic", name="claude", model=MODEL)
    backend = AnthropicBackend(settings, transport=upstream.transport)
    await backend.start()
    return backend


def chat(**extra: Any) -> ChatCompletionRequest:
    body = {"model": "alias", "messages": [{"role": "user", "content": "hi"}], **extra}
    return ChatCompletionRequest.model_validate(body)


def wire(request: ChatCompletionRequest, stream: bool = False) -> dict[str, Any]:
    return to_messages_request(request, model=MODEL, default_max_tokens=1024, stream=stream)


SCHEMA = {"type": "object", "properties": {"location": {"type": "string"}}}
WEATHER = {"name": "get_weather", "description": "Weather for a place", "parameters": SCHEMA}
WEATHER_TOOL = {"type": "function", "function": WEATHER}

# --- OpenAI → Anthropic -----------------------------------------------------------------


def test_system_hoisted_defaults_and_stop() -> None:
    body = wire(
        chat(
            messages=[
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "hi"},
                {"role": "developer", "content": "Use French."},
            ],
            stop="END",
            temperature=1.7,
            top_k=5,
            user="u-1",
            logit_bias_unknown=1,
        )
    )
    assert body["system"] == "Be brief.\n\nUse French."
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert body["max_tokens"] == 1024 and body["stop_sequences"] == ["END"]
    assert body["temperature"] == 1.0 and body["top_k"] == 5
    assert body["metadata"] == {"user_id": "u-1"} and "logit_bias_unknown" not in body
    assert "stream" not in body and wire(chat(), stream=True)["stream"] is True
    assert wire(chat(max_tokens=50, max_completion_tokens=80))["max_tokens"] == 80


def test_images() -> None:
    content = [
        {"type": "text", "text": "what is this?", "cache_control": {"type": "ephemeral"}},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
    ]
    blocks = wire(chat(messages=[{"role": "user", "content": content}]))["messages"][0]["content"]
    assert blocks == [
        {"type": "text", "text": "what is this?", "cache_control": {"type": "ephemeral"}},
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
        },
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
    ]
    with pytest.raises(InvalidRequestError):
        bad = [{"type": "image_url", "image_url": {"url": "ftp://x/y.png"}}]
        wire(chat(messages=[{"role": "user", "content": bad}]))


def test_files_become_documents() -> None:
    pdf = {"file_data": "data:application/pdf;base64,JVBERi0xLjQK", "filename": "a.pdf"}
    content = [{"type": "text", "text": "sum it up"}, {"type": "file", "file": pdf}]
    blocks = wire(chat(messages=[{"role": "user", "content": content}]))["messages"][0]["content"]
    assert blocks[1] == {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjQK"},
        "title": "a.pdf",
    }
    with pytest.raises(InvalidRequestError) as caught:
        stored = [{"type": "file", "file": {"file_id": "file-abc"}}]
        wire(chat(messages=[{"role": "user", "content": stored}]))
    assert caught.value.param == "messages[0].content.file.file_data"


@pytest.mark.parametrize(
    ("choice", "parallel", "expected"),
    [
        (None, None, None),
        ("auto", None, {"type": "auto"}),
        ("required", None, {"type": "any"}),
        ("none", None, {"type": "none"}),
        (
            {"type": "function", "function": {"name": "get_weather"}},
            None,
            {"type": "tool", "name": "get_weather"},
        ),
        ("required", False, {"type": "any", "disable_parallel_tool_use": True}),
        (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
    ],
)
def test_tools_and_tool_choice(choice: Any, parallel: bool | None, expected: Any) -> None:
    body = wire(chat(tools=[WEATHER_TOOL], tool_choice=choice, parallel_tool_calls=parallel))
    tool = {"name": "get_weather", "description": "Weather for a place", "input_schema": SCHEMA}
    assert body["tools"] == [tool]
    assert body.get("tool_choice") == expected


def call(call_id: str, arguments: str, name: str = "get_weather") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_tool_conversation_merges_turns() -> None:
    messages = [
        {"role": "user", "content": "weather in SF and NYC?"},
        {"role": "user", "content": "in celsius"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                call("call_1", '{"location": "SF"}'),
                call("call_2", '{"location": "NYC"}'),
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
        {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "25C"}]},
        {"role": "user", "content": "thanks"},
    ]
    turns = wire(chat(messages=messages, tools=[WEATHER_TOOL]))["messages"]
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    assert [b["text"] for b in turns[0]["content"]] == ["weather in SF and NYC?", "in celsius"]
    assert turns[1]["content"] == [
        {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"location": "SF"}},
        {"type": "tool_use", "id": "call_2", "name": "get_weather", "input": {"location": "NYC"}},
    ]
    assert turns[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "call_1", "content": "18C"},
        {"type": "tool_result", "tool_use_id": "call_2", "content": "25C"},
        {"type": "text", "text": "thanks"},
    ]


@pytest.mark.parametrize(
    "extra",
    [
        {"n": 2},
        {"logprobs": True},
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}},
        {"messages": [{"role": "assistant", "tool_calls": [call("c", "[1")]}]},
    ],
)
def test_refused_requests(extra: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequestError) as info:
        wire(chat(**extra))
    assert not counts_as_failure(info.value)


# --- Anthropic → OpenAI, and round trips ----------------------------------------------------


def test_text_message_and_cache_usage() -> None:
    result = from_message(TEXT_MESSAGE)
    assert result.id == TEXT_MESSAGE["id"] and result.model == MODEL
    assert result.choices[0].message.content == "Hello!"
    assert result.choices[0].finish_reason == "stop"
    usage = result.usage
    assert usage is not None and usage.prompt_tokens == 117 and usage.completion_tokens == 6
    assert usage.total_tokens == 123
    assert (
        usage.prompt_tokens_details is not None and usage.prompt_tokens_details.cached_tokens == 100
    )


@pytest.mark.parametrize(
    ("stop_reason", "finish"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("tool_use", "tool_calls"),
        ("refusal", "content_filter"),
    ],
)
def test_stop_reasons(stop_reason: str, finish: str) -> None:
    assert (
        from_message({**TEXT_MESSAGE, "stop_reason": stop_reason}).choices[0].finish_reason
        == finish
    )


def test_tool_use_round_trip() -> None:
    """A tool_use answer becomes tool_calls, and sent back it becomes the same tool_use."""
    result = from_message(TOOL_MESSAGE)
    message = result.choices[0].message
    assert result.choices[0].finish_reason == "tool_calls"
    assert message.content == "I'll check the weather."
    assert message.tool_calls is not None
    call = message.tool_calls[0]
    assert call.id == "toolu_01A09q90qw90lq917835lq9" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == TOOL_USE["input"]

    history = [
        {"role": "user", "content": "weather?"},
        message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "15 degrees"},
    ]
    turns = wire(chat(messages=history, tools=[WEATHER_TOOL]))["messages"]
    assert turns[1] == {"role": "assistant", "content": TOOL_MESSAGE["content"]}
    assert turns[2]["content"][0]["tool_use_id"] == call.id


# --- the backend over MockTransport -------------------------------------------------------------


async def test_chat_over_http(monkeypatch: pytest.MonkeyPatch) -> None:
    upstream = Upstream(json_answer(TEXT_MESSAGE))
    backend = await started(upstream, monkeypatch)
    assert isinstance(backend, Backend)
    result = await backend.chat(
        chat(messages=[{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}])
    )
    await backend.aclose()
    sent = upstream.requests[-1]
    assert sent.url == "https://api.anthropic.com/v1/messages"
    assert sent.headers["x-api-key"] == "sk-ant-test"
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert upstream.body()["system"] == "S" and upstream.body()["model"] == MODEL
    assert result.choices[0].message.content == "Hello!"
    assert backend.stats().in_flight == 0


async def collect(b: AnthropicBackend, r: ChatCompletionRequest) -> list[ChatCompletionChunk]:
    return [chunk async for chunk in b.chat_stream(r)]


async def test_stream_text_and_tool_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    upstream = Upstream(stream_answer(STREAM_EVENTS))
    backend = await started(upstream, monkeypatch)
    chunks = await collect(backend, chat(stream=True, tools=[WEATHER_TOOL]))
    await backend.aclose()
    assert upstream.body()["stream"] is True
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.id == "msg_014p7gG3wDgGV9EUtLvnow3U" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Okay, let"

    deltas = [d for c in chunks if c.choices for d in c.choices[0].delta.tool_calls or []]
    first = deltas[0]
    assert (first.index, first.id, first.type) == (0, "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "function")
    assert first.function == {"name": "get_weather", "arguments": ""}
    assert [d.id for d in deltas[1:3]] == [None, None]
    arguments: dict[int, str] = {}
    for d in deltas:
        arguments[d.index] = arguments.get(d.index, "") + (d.function or {}).get("arguments", "")
    assert json.loads(arguments[0]) == {"location": "San Francisco, CA"}
    assert json.loads(arguments[1]) == {} and deltas[-2].id == "toolu_02"

    assert chunks[-2].choices[0].finish_reason == "tool_calls"
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (500, 89)
    details = last.usage.prompt_tokens_details
    assert details is not None and details.cached_tokens == 28


async def test_stream_thinking_goes_to_reasoning_content(monkeypatch: pytest.MonkeyPatch) -> None:
    events = [
        MESSAGE_START,
        block(0, "thinking", thinking=""),
        delta(0, "thinking_delta", thinking="hmm"),
        delta(0, "signature_delta", signature="x"),
        event("message_delta", delta={"stop_reason": "max_tokens"}, usage={"output_tokens": 3}),
        event("message_stop"),
    ]
    backend = await started(Upstream(stream_answer(events)), monkeypatch)
    chunks = await collect(backend, chat(stream=True))
    await backend.aclose()
    assert chunks[1].choices[0].delta.reasoning_content == "hmm"
    assert chunks[-2].choices[0].finish_reason == "length"


# --- errors ---------------------------------------------------------------------------------

HTTP_ERRORS = [
    # status, Anthropic error type, headers, class, client status, retry_after, counts
    (529, "overloaded_error", {"retry-after": "7"}, ServiceUnavailableError, 503, 7.0, True),
    (529, "overloaded_error", {}, ServiceUnavailableError, 503, 1.0, True),
    (429, "rate_limit_error", {"retry-after": "12"}, RateLimitError, 429, 12.0, True),
    (400, "invalid_request_error", {}, InvalidRequestError, 400, None, False),
    (413, "request_too_large", {}, InvalidRequestError, 400, None, False),
    (401, "authentication_error", {}, UpstreamError, 502, None, True),
    (500, "api_error", {}, UpstreamError, 502, None, True),
]


@pytest.mark.parametrize("case", HTTP_ERRORS)
@pytest.mark.parametrize("stream", [False, True])
async def test_http_errors(
    monkeypatch: pytest.MonkeyPatch, case: tuple[Any, ...], stream: bool
) -> None:
    status, kind, headers, cls, client_status, retry_after, counts = case
    upstream = Upstream(json_answer(error_body(kind, f"{kind} says no"), status, headers))
    backend = await started(upstream, monkeypatch)
    with pytest.raises(cls) as info:
        if stream:
            await collect(backend, chat(stream=True))
        else:
            await backend.chat(chat())
    await backend.aclose()
    exc = info.value
    assert type(exc) is cls and exc.status_code == client_status
    assert exc.retry_after == retry_after and counts_as_failure(exc) is counts
    assert upstream_status(exc) == status
    if status == 400:
        assert exc.message == "invalid_request_error says no"


async def test_prompt_too_long_is_context_length_exceeded(monkeypatch: pytest.MonkeyPatch) -> None:
    message = "prompt is too long: 210000 tokens > 200000 maximum"
    upstream = Upstream(json_answer(error_body("invalid_request_error", message), 400, {}))
    backend = await started(upstream, monkeypatch)
    with pytest.raises(ContextLengthExceededError) as info:
        await backend.chat(chat())
    await backend.aclose()
    assert info.value.status_code == 400 and info.value.code == "context_length_exceeded"
    assert counts_as_failure(info.value) is False


async def test_error_event_mid_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    events = [*STREAM_EVENTS[:4], error_body("overloaded_error", "Overloaded")]
    backend = await started(Upstream(stream_answer(events)), monkeypatch)
    received: list[ChatCompletionChunk] = []
    with pytest.raises(ServiceUnavailableError) as info:
        async for chunk in backend.chat_stream(chat(stream=True)):
            received.append(chunk)
    await backend.aclose()
    assert len(received) == 2 and info.value.retry_after == 1.0 and counts_as_failure(info.value)


async def test_stream_cut_before_message_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = await started(Upstream(stream_answer(STREAM_EVENTS[:5])), monkeypatch)
    with pytest.raises(UpstreamError, match="message_stop"):
        await collect(backend, chat(stream=True))
    await backend.aclose()


@pytest.mark.parametrize(
    ("exc", "cls"),
    [
        (httpx.ConnectError("refused"), ServiceUnavailableError),
        (httpx.ReadTimeout("slow"), UpstreamTimeoutError),
        (httpx.RemoteProtocolError("peer closed"), UpstreamError),
    ],
)
async def test_transport_errors(
    monkeypatch: pytest.MonkeyPatch, exc: Exception, cls: type[GatewayError]
) -> None:
    def fail(request: httpx.Request) -> httpx.Response:
        raise exc

    backend = await started(Upstream(fail), monkeypatch)
    for stream in (False, True):
        with pytest.raises(cls) as info:
            if stream:
                await collect(backend, chat(stream=True))
            else:
                await backend.chat(chat())
        assert counts_as_failure(info.value)
    await backend.aclose()


async def test_chat_only_and_key(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = await started(Upstream(json_answer(TEXT_MESSAGE)), monkeypatch)
    assert not backend.capabilities.completions and backend.capabilities.tools
    request = CompletionRequest(model="alias", prompt="hi")
    with pytest.raises(InvalidRequestError, match="chat only"):
        await backend.completion(request)
    with pytest.raises(InvalidRequestError, match="chat only"):
        [c async for c in backend.completion_stream(request)]
    await backend.aclose()
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(RuntimeError, match="ANTHROPIC_API_KEY"):
        await backend.start()
