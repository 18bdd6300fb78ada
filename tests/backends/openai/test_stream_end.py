"""OpenAICompatBackend: when a stream is whole, the model name answers carry, the error
fields an upstream sends, and health probes (against tests/fixtures/fault_upstream)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from backends.base import Timeouts
from backends.openai.backend import OpenAICompatBackend, OpenAICompatSettings
from backends.openai.frames import model_swap
from gateway.errors import ContextLengthExceededError, InvalidRequestError, StreamCutError
from gateway.protocol import ChatCompletionRequest, CompletionRequest
from tests.fixtures.fault_upstream import CHUNKS, FaultUpstream

TEXT = "".join(f"word{i} " for i in range(CHUNKS))


@pytest.fixture(scope="module")
def upstream() -> Iterator[FaultUpstream]:
    with FaultUpstream() as server:
        yield server


def make_backend(url: str, **overrides: Any) -> OpenAICompatBackend:
    fields: dict[str, Any] = {"backend": "openai", "name": "up", "model": "upstream-model"}
    timeouts = Timeouts(first_token_s=2, total_s=10)
    return OpenAICompatBackend(
        OpenAICompatSettings(**{**fields, "base_url": url, "timeouts": timeouts, **overrides})
    )


@pytest.fixture(scope="module")
async def backend(upstream: FaultUpstream) -> AsyncIterator[OpenAICompatBackend]:
    b = make_backend(upstream.url)
    await b.start()
    yield b
    await b.aclose()


def chat(**extra: Any) -> ChatCompletionRequest:
    body = {"model": "alias", "messages": [{"role": "user", "content": "hi"}], **extra}
    return ChatCompletionRequest.model_validate(body)


def frames_of(pieces: list[bytes]) -> list[dict[str, Any]]:
    data = b"".join(pieces).split(b"\n\n")
    return [json.loads(f.removeprefix(b"data: ")) for f in data if f]


# --- a stream is whole once it finished -----------------------------------------------------


@pytest.mark.parametrize("fault", ["nosentinel", "nosentinel,hold"])
async def test_parsed_stream_without_done_ends_with_the_upstream_usage(
    backend: OpenAICompatBackend, fault: str
) -> None:
    chunks = [c async for c in backend.chat_stream(chat(x_fault=fault))]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == TEXT
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == CHUNKS


@pytest.mark.parametrize("fault", ["nosentinel", "nosentinel,hold", "nodone:20,nousage"])
async def test_raw_stream_without_done_is_whole(backend: OpenAICompatBackend, fault: str) -> None:
    # "hold" keeps the body open after the usage chunk: the stream ends at that chunk,
    # well before the 2 s read timeout would call it stalled
    stream = backend.chat_stream_raw(chat(x_fault=fault))
    frames = frames_of([f async for f in stream])
    assert len(frames) == CHUNKS and frames[-1]["choices"][0]["finish_reason"] == "stop"
    assert stream.usage is not None and stream.usage.completion_tokens == CHUNKS
    assert stream.usage_frame is not None


async def test_a_body_that_ends_before_any_finish_is_cut(backend: OpenAICompatBackend) -> None:
    with pytest.raises(StreamCutError, match="before its answer finished"):
        [f async for f in backend.chat_stream_raw(chat(x_fault="nodone:19"))]
    completion = CompletionRequest(model="alias", prompt="say")
    completion.x_fault = "nodone:5"  # type: ignore[attr-defined]
    with pytest.raises(StreamCutError):
        [c async for c in backend.completion_stream(completion)]


# --- the public model name ------------------------------------------------------------------


async def test_every_answer_carries_the_public_model_name(
    backend: OpenAICompatBackend, upstream: FaultUpstream
) -> None:
    assert (await backend.chat(chat())).model == "alias"
    assert upstream.last().body["model"] == "upstream-model"
    assert {c.model async for c in backend.chat_stream(chat(stream=True))} == {"alias"}
    raw = backend.chat_stream_raw(chat(stream=True))
    frames = frames_of([f async for f in raw])
    assert {f["model"] for f in frames} == {"alias"}
    assert raw.usage_frame is not None and json.loads(raw.usage_frame[6:])["model"] == "alias"
    unused = backend.chat_stream_raw(chat(stream=True, x_fault="nousage"))
    [f async for f in unused]
    assert unused.usage_frame is not None and b'"model":"alias"' in unused.usage_frame
    completion = CompletionRequest(model="alias", prompt="say")
    assert (await backend.completion(completion)).model == "alias"


def test_the_model_field_is_swapped_only_when_it_differs() -> None:
    first = b'data: {"id":"x","model":"gpt-4o-2024-08-06","choices":[]}'
    assert model_swap(first, b'"gpt-4o-2024-08-06"') is None
    swap = model_swap(first, json.dumps('my "chat"').encode())
    assert swap == (b'"model":"gpt-4o-2024-08-06"', b'"model":"my \\"chat\\""')
    spaced = b'data: {"id": "x", "model": "up", "choices": []}'
    assert model_swap(spaced, b'"alias"') == (b'"model": "up"', b'"model":"alias"')
    assert model_swap(b'data: {"id":"x"}', b'"alias"') is None


# --- error fields and health probes ---------------------------------------------------------


async def test_upstream_param_and_code_survive(backend: OpenAICompatBackend) -> None:
    with pytest.raises(InvalidRequestError) as info:
        await backend.chat(chat(x_fault="400,param:temperature"))
    assert info.value.param == "temperature" and info.value.code == "invalid_value"
    with pytest.raises(ContextLengthExceededError) as too_long:
        await backend.chat(chat(x_fault="ctx:1"))
    assert too_long.value.param == "messages" and "maximum context length is 1" in (
        too_long.value.message
    )


async def test_health_probes_the_model_list(
    backend: OpenAICompatBackend, upstream: FaultUpstream
) -> None:
    seen, chats = len(upstream.probes), len(upstream.chat_probes)
    assert await backend.health(1.0) is True
    upstream.default_fault = "503"
    try:
        assert await backend.health(1.0) is False
    finally:
        upstream.default_fault = None
    assert len(upstream.probes) == seen + 2
    assert len(upstream.chat_probes) == chats + 1  # the model list up: chat asked too; down: not
    elsewhere = make_backend(upstream.url, health_path="health")  # not served there: 404
    off = make_backend(upstream.url, health_check=False)
    for b, expected in ((elsewhere, True), (off, None)):  # the list cannot tell: chat does
        await b.start()
        try:
            assert await b.health(1.0) is expected
        finally:
            await b.aclose()
