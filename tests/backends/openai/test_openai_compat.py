"""OpenAICompatBackend against a real HTTP server on loopback (tests/fixtures/fault_upstream)."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from backends.base import Backend, Timeouts
from backends.http.errors import counts_as_failure, upstream_status
from backends.openai.backend import OpenAICompatBackend, OpenAICompatSettings
from gateway.errors import (
    GatewayError,
    InvalidRequestError,
    ModelNotFoundError,
    RateLimitError,
    ServiceUnavailableError,
    UpstreamError,
    UpstreamTimeoutError,
)
from gateway.protocol import ChatCompletionRequest, CompletionRequest, EmbeddingRequest
from tests.fixtures.fault_upstream import CHUNKS, FaultUpstream

TEXT = "".join(f"word{i} " for i in range(CHUNKS))


@pytest.fixture(scope="module")
def upstream() -> Iterator[FaultUpstream]:
    with FaultUpstream() as server:
        yield server


def make_backend(url: str, **overrides: Any) -> OpenAICompatBackend:
    fields: dict[str, Any] = {"backend": "openai", "name": "up", "model": "upstream-model"}
    settings = OpenAICompatSettings(**{**fields, "base_url": url, **overrides})
    return OpenAICompatBackend(settings)


@pytest.fixture(scope="module")
async def backend(upstream: FaultUpstream) -> AsyncIterator[OpenAICompatBackend]:
    b = make_backend(upstream.url, timeouts=Timeouts(first_token_s=2, total_s=5))
    await b.start()
    yield b
    await b.aclose()


def chat(**extra: Any) -> ChatCompletionRequest:
    body = {"model": "alias", "messages": [{"role": "user", "content": "hi"}], **extra}
    return ChatCompletionRequest.model_validate(body)


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
SCHEMA = {
    "type": "json_schema",
    "json_schema": {"name": "answer", "schema": {"type": "object"}, "strict": True},
}
PASSTHROUGH = {
    "tools": TOOLS,
    "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    "response_format": SCHEMA,
    "logprobs": True,
    "top_logprobs": 3,
    "seed": 7,
    "reasoning_effort": "low",
    "vendor_extension": {"nested": [1, 2, {"x": None}]},
}


# --- pass-through -----------------------------------------------------------------------


def test_satisfies_backend_protocol(upstream: FaultUpstream) -> None:
    b = make_backend(upstream.url)
    assert isinstance(b, Backend)
    assert b.capabilities.tools and b.capabilities.json_schema and b.capabilities.images
    assert not b.capabilities.embeddings


async def test_chat_passes_fields_through(
    backend: OpenAICompatBackend, upstream: FaultUpstream
) -> None:
    result = await backend.chat(chat(**PASSTHROUGH))
    sent = upstream.last().body
    assert sent["model"] == "upstream-model"
    assert sent["stream"] is False and "stream_options" not in sent
    for key, value in PASSTHROUGH.items():
        assert sent[key] == value, key
    assert result.choices[0].message.content == TEXT
    assert result.usage is not None and result.usage.completion_tokens == CHUNKS
    assert (result.model_extra or {})["echo"]["vendor_extension"] == PASSTHROUGH["vendor_extension"]


async def test_stream_asks_for_usage_and_passes_fields(
    backend: OpenAICompatBackend, upstream: FaultUpstream
) -> None:
    options = {"include_usage": False, "extra_opt": 1}
    request = chat(stream=True, stream_options=options, **PASSTHROUGH)
    chunks = [c async for c in backend.chat_stream(request)]
    sent = upstream.last().body
    assert sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True, "extra_opt": 1}
    for key, value in PASSTHROUGH.items():
        assert sent[key] == value, key
    assert len(chunks) == CHUNKS + 1
    assert "".join(c.choices[0].delta.content or "" for c in chunks[:-1]) == TEXT


async def test_stream_ends_with_upstream_usage(backend: OpenAICompatBackend) -> None:
    chunks = [c async for c in backend.chat_stream(chat(stream=True))]
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert last.usage.completion_tokens == CHUNKS
    assert all(c.usage is None for c in chunks[:-1])
    assert chunks[-2].choices[0].finish_reason == "stop"


async def test_stream_counts_usage_when_upstream_omits_it(backend: OpenAICompatBackend) -> None:
    chunks = [c async for c in backend.chat_stream(chat(stream=True, x_fault="nousage"))]
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert last.usage.completion_tokens == (len(TEXT) + 3) // 4
    assert last.usage.prompt_tokens == 1  # "hi": 2 characters
    assert last.id == "chatcmpl-fault"


def split_frames(pieces: list[bytes]) -> list[bytes]:
    assert all(p.endswith(b"\n\n") for p in pieces)
    return [f + b"\n\n" for f in b"".join(pieces).split(b"\n\n") if f]


async def test_raw_stream_passes_frames_and_holds_usage(backend: OpenAICompatBackend) -> None:
    stream = backend.chat_stream_raw(chat(stream=True))
    frames = split_frames([f async for f in stream])
    assert len(frames) == CHUNKS
    assert all(f.startswith(b"data: {") for f in frames)
    assert stream.usage is not None and stream.usage.completion_tokens == CHUNKS
    assert stream.usage_frame is not None and b'"choices": []' in stream.usage_frame


async def test_raw_stream_writes_each_frame_as_soon_as_it_arrives(
    backend: OpenAICompatBackend,
) -> None:
    stream = backend.chat_stream_raw(chat(stream=True, x_fault="slow:20"))
    pieces = [f async for f in stream]
    assert len(pieces) == CHUNKS  # 20 ms apart upstream: none waits for the next


async def test_raw_stream_counts_frames_without_usage(backend: OpenAICompatBackend) -> None:
    stream = backend.chat_stream_raw(chat(stream=True, x_fault="nousage"))
    frames = split_frames([f async for f in stream])
    assert len(frames) == CHUNKS
    assert stream.usage is not None and stream.usage.completion_tokens == CHUNKS
    assert stream.usage_frame is not None
    assert b'"choices":[]' in stream.usage_frame and b'"completion_tokens":20' in stream.usage_frame


async def test_completion_and_stream(backend: OpenAICompatBackend, upstream: FaultUpstream) -> None:
    request = CompletionRequest(model="alias", prompt="say", logprobs=2)
    result = await backend.completion(request)
    assert result.choices[0].text == TEXT and upstream.last().body["logprobs"] == 2
    chunks = [c async for c in backend.completion_stream(request)]
    assert "".join(c.choices[0].text for c in chunks[:-1]) == TEXT
    assert chunks[-1].choices == [] and chunks[-1].usage is not None


async def test_embeddings(backend: OpenAICompatBackend, upstream: FaultUpstream) -> None:
    request = EmbeddingRequest(model="alias", input=["a", "b"], dimensions=3, extra_field="x")
    result = await backend.embeddings(request)
    assert [d.index for d in result.data] == [0, 1] and result.usage.prompt_tokens > 0
    sent = {"model": "upstream-model", "input": ["a", "b"], "dimensions": 3, "extra_field": "x"}
    assert upstream.last().body == sent and upstream.last().path == "/v1/embeddings"


async def test_auth_and_headers(upstream: FaultUpstream, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAULT_UPSTREAM_KEY", "sk-test")
    b = make_backend(upstream.url, api_key_env="FAULT_UPSTREAM_KEY", headers={"x-org": "acme"})
    await b.start()
    try:
        await b.chat(chat())
    finally:
        await b.aclose()
    headers = upstream.last().headers
    assert headers["authorization"] == "Bearer sk-test" and headers["x-org"] == "acme"


async def test_missing_key_and_not_started(upstream: FaultUpstream) -> None:
    b = make_backend(upstream.url, api_key_env="SHUNTER_TEST_UNSET_KEY")
    with pytest.raises(RuntimeError, match="SHUNTER_TEST_UNSET_KEY"):
        await b.start()
    with pytest.raises(RuntimeError, match="not started"):
        await b.chat(chat())


async def test_connections_are_reused(
    backend: OpenAICompatBackend, upstream: FaultUpstream
) -> None:
    await backend.chat(chat())
    before = upstream.connections_opened
    for _ in range(5):
        await backend.chat(chat())
        [c async for c in backend.chat_stream(chat(stream=True))]
    assert upstream.connections_opened == before
    assert backend.stats().in_flight == 0


# --- errors -----------------------------------------------------------------------------

STATUS_FAULTS = [
    # fault, error class, client status, retry_after, counts as a deployment failure
    ("500", UpstreamError, 502, None, True),
    ("503:3", UpstreamError, 502, 3.0, True),
    ("429:2", RateLimitError, 429, 2.0, True),
    ("429:1500ms", RateLimitError, 429, 1.5, True),
    ("529", ServiceUnavailableError, 503, 1.0, True),
    ("400", InvalidRequestError, 400, None, False),
    ("404", ModelNotFoundError, 404, None, False),
    ("413", InvalidRequestError, 400, None, False),
    ("422", InvalidRequestError, 400, None, False),
    ("401", UpstreamError, 502, None, True),
    ("403", UpstreamError, 502, None, True),
]


@pytest.mark.parametrize(("fault", "cls", "status", "retry_after", "counts"), STATUS_FAULTS)
@pytest.mark.parametrize("stream", [False, True])
async def test_status_faults(
    backend: OpenAICompatBackend,
    fault: str,
    cls: type[GatewayError],
    status: int,
    retry_after: float | None,
    counts: bool,
    stream: bool,
) -> None:
    request = chat(x_fault=fault)
    with pytest.raises(cls) as info:
        if stream:
            [c async for c in backend.chat_stream(request)]
        else:
            await backend.chat(request)
    exc = info.value
    assert type(exc) is cls
    assert exc.status_code == status and exc.retry_after == retry_after
    assert counts_as_failure(exc) is counts
    assert upstream_status(exc) == int(fault.split(":")[0])
    if fault in ("401", "403"):
        assert exc.should_retry is False and "credentials" in exc.message
    assert backend.stats().in_flight == 0


@pytest.mark.parametrize("stream", [False, True])
async def test_reset_before_answer(backend: OpenAICompatBackend, stream: bool) -> None:
    with pytest.raises(UpstreamError) as info:
        if stream:
            [c async for c in backend.chat_stream(chat(x_fault="reset"))]
        else:
            await backend.chat(chat(x_fault="reset"))
    assert counts_as_failure(info.value)


async def test_connect_refused_is_unavailable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    b = make_backend(f"http://127.0.0.1:{port}/v1")
    await b.start()
    try:
        with pytest.raises(ServiceUnavailableError) as info:
            await b.chat(chat())
        assert counts_as_failure(info.value)
    finally:
        await b.aclose()


@pytest.mark.parametrize(("fault", "after"), [("cut:3", 3), ("nodone:3", 3), ("error:2", 2)])
async def test_stream_failure_after_first_chunks_raises(
    backend: OpenAICompatBackend, fault: str, after: int
) -> None:
    received: list[str] = []
    with pytest.raises(UpstreamError) as info:
        async for chunk in backend.chat_stream(chat(x_fault=fault)):
            received.append(chunk.choices[0].delta.content or "")
    assert len(received) == after
    assert counts_as_failure(info.value)


async def test_raw_stream_failure_raises(backend: OpenAICompatBackend) -> None:
    stream = backend.chat_stream_raw(chat(x_fault="error:2"))
    with pytest.raises(UpstreamError, match="boom"):
        [f async for f in stream]


@pytest.mark.parametrize("fault", ["hang", "stall:0"])
async def test_first_token_timeout(upstream: FaultUpstream, fault: str) -> None:
    b = make_backend(upstream.url, timeouts=Timeouts(first_token_s=0.3, total_s=10))
    await b.start()
    started = time.monotonic()
    try:
        with pytest.raises(UpstreamTimeoutError) as info:
            [c async for c in b.chat_stream(chat(x_fault=fault))]
    finally:
        await b.aclose()
    assert 0.25 < time.monotonic() - started < 2.0
    assert "first byte" in info.value.message or "no response" in info.value.message
    assert counts_as_failure(info.value)
    assert await asyncio.to_thread(upstream.last().wait_closed, 2.0)


async def test_stall_mid_stream_times_out(upstream: FaultUpstream) -> None:
    b = make_backend(upstream.url, timeouts=Timeouts(first_token_s=0.3, total_s=10))
    await b.start()
    received = 0
    try:
        with pytest.raises(UpstreamTimeoutError):
            async for _ in b.chat_stream(chat(x_fault="stall:2")):
                received += 1
    finally:
        await b.aclose()
    assert received == 2


async def test_total_timeout(upstream: FaultUpstream) -> None:
    # the first-token deadline well past the total one: a slow first chunk on a busy
    # machine still meets the total deadline first
    b = make_backend(upstream.url, timeouts=Timeouts(first_token_s=10, total_s=0.4))
    await b.start()
    try:
        with pytest.raises(UpstreamTimeoutError, match="total"):
            [c async for c in b.chat_stream(chat(x_fault="slow:50"))]
        with pytest.raises(UpstreamTimeoutError):
            await b.chat(chat(x_fault="hang"))
    finally:
        await b.aclose()


# --- cancellation -----------------------------------------------------------------------


async def test_aclose_closes_upstream_connection(
    backend: OpenAICompatBackend, upstream: FaultUpstream
) -> None:
    stream = backend.chat_stream(chat(x_fault="slow:50"))
    await anext(stream)
    await anext(stream)
    rec = upstream.last()
    await stream.aclose()  # type: ignore[attr-defined]
    assert await asyncio.to_thread(rec.wait_closed, 1.0)
    assert rec.chunks_sent < CHUNKS and not rec.finished
    assert backend.stats().in_flight == 0


async def test_cancelled_consumer_closes_upstream_connection(
    backend: OpenAICompatBackend, upstream: FaultUpstream
) -> None:
    got_one = asyncio.Event()

    async def consume() -> None:
        async for _ in backend.chat_stream(chat(x_fault="slow:50")):
            got_one.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(got_one.wait(), 2)
    rec = upstream.last()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(rec.wait_closed, 1.0)
    assert rec.chunks_sent < CHUNKS
    assert backend.stats().in_flight == 0


async def test_raw_stream_aclose_closes_upstream_connection(
    backend: OpenAICompatBackend, upstream: FaultUpstream
) -> None:
    async with backend.chat_stream_raw(chat(x_fault="slow:50")) as stream:
        await anext(stream)
        rec = upstream.last()
    assert await asyncio.to_thread(rec.wait_closed, 1.0)
    assert rec.chunks_sent < CHUNKS


async def test_fixture_fault_queue_and_model_prefix(
    backend: OpenAICompatBackend, upstream: FaultUpstream
) -> None:
    upstream.queue.extend(["503", None])
    with pytest.raises(UpstreamError):
        await backend.chat(chat())
    assert (await backend.chat(chat())).choices[0].message.content == TEXT
    prefixed = make_backend(upstream.url, model="fault:429:2")
    await prefixed.start()
    try:
        with pytest.raises(RateLimitError):
            await prefixed.chat(chat())
    finally:
        await prefixed.aclose()


class ForwardProxy:
    """A plain-HTTP forward proxy on loopback: absolute-form requests are sent on to their
    origin over a fresh connection, the answer piped back; it records what it forwarded."""

    def __init__(self) -> None:
        self.forwarded: list[str] = []
        self._server: asyncio.Server | None = None

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:  # the client keeps its connection to the proxy alive
                head = await reader.readuntil(b"\r\n\r\n")
                await self._forward(head, reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _forward(
        self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        method, target, version = head.split(b"\r\n", 1)[0].split(b" ")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        body = await reader.readexactly(length)
        url = target.decode()
        self.forwarded.append(f"{method.decode()} {url}")
        host_port, _, path = url.removeprefix("http://").partition("/")
        host, _, port = host_port.partition(":")
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        rest = head.split(b"\r\n", 1)[1].replace(b"\r\n\r\n", b"\r\nconnection: close\r\n\r\n")
        up_writer.write(b"%s /%s %s\r\n%s%s" % (method, path.encode(), version, rest, body))
        await up_writer.drain()
        while data := await up_reader.read(65536):  # the answer is framed: relay it whole
            writer.write(data)
            await writer.drain()
        up_writer.close()


async def test_proxy_from_the_environment_is_used(
    upstream: FaultUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = ForwardProxy()
    proxy_url = await proxy.start()
    for name in ("no_proxy", "NO_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("http_proxy", proxy_url)
    monkeypatch.setenv("HTTP_PROXY", proxy_url)
    backend = make_backend(upstream.url)
    await backend.start()
    try:
        result = await backend.chat(chat())
        chunks = [c async for c in backend.chat_stream(chat(stream=True))]
    finally:
        await backend.aclose()
        await proxy.close()
    assert result.choices[0].message.content == TEXT
    assert "".join(c.choices[0].delta.content or "" for c in chunks[:-1]) == TEXT
    assert proxy.forwarded == [f"POST {upstream.url}/chat/completions"] * 2


def test_no_proxy_hosts_go_direct(monkeypatch: pytest.MonkeyPatch) -> None:
    from backends.http.upstream import proxied

    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert not proxied("https://api.openai.com/v1")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    monkeypatch.delenv("no_proxy", raising=False)
    assert proxied("https://api.openai.com/v1")
    assert not proxied("http://127.0.0.1:9000/v1")  # another scheme, and exempt anyway
    monkeypatch.setenv("NO_PROXY", "api.openai.com")
    assert not proxied("https://api.openai.com/v1")


# --- output budget name and reasoning -------------------------------------------------


def test_openais_own_api_gets_max_completion_tokens_by_default() -> None:
    def field(**overrides: Any) -> str | None:
        fields: dict[str, Any] = {"backend": "openai", "name": "up", "model": "m"}
        return OpenAICompatSettings(**{**fields, **overrides}).output_budget_field()

    assert field() == "max_completion_tokens"  # base_url defaults to OpenAI's
    assert field(base_url="http://127.0.0.1:8080/v1") is None
    assert field(base_url="http://127.0.0.1:8080/v1", max_tokens_field="max_tokens") == (
        "max_tokens"
    )


@pytest.mark.parametrize(
    ("setting", "sent", "expected"),
    [
        ("max_completion_tokens", {"max_tokens": 9}, {"max_completion_tokens": 9}),
        ("max_tokens", {"max_completion_tokens": 9}, {"max_tokens": 9}),
        (None, {"max_tokens": 9}, {"max_tokens": 9}),
    ],
)
async def test_the_output_budget_goes_under_the_deployments_name(
    upstream: FaultUpstream, setting: str | None, sent: dict[str, Any], expected: dict[str, Any]
) -> None:
    b = make_backend(upstream.url, max_tokens_field=setting)
    await b.start()
    try:
        await b.chat(chat(**sent))
    finally:
        await b.aclose()
    body = upstream.last().body
    assert {k: body[k] for k in ("max_tokens", "max_completion_tokens") if k in body} == expected


@pytest.mark.parametrize("spec", ["think:2", "reason:2"])
async def test_upstream_reasoning_is_read_whole_and_streamed(
    upstream: FaultUpstream, spec: str
) -> None:
    b = make_backend(upstream.url, model=f"fault:{spec}")
    await b.start()
    try:
        whole = await b.chat(chat())
        chunks = [c async for c in b.chat_stream(chat(stream=True))]
    finally:
        await b.aclose()
    message = whole.choices[0].message
    assert message.reasoning_content == "word0 word1 "
    # the upstream's own name stays beside it, as in its streamed frames
    kept = (message.model_extra or {}).get("reasoning")
    assert kept == ("word0 word1 " if spec.startswith("reason") else None)
    streamed = "".join(c.choices[0].delta.reasoning_content or "" for c in chunks if c.choices)
    assert streamed == "word0 word1 "
