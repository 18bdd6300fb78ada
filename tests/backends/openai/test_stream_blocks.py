"""The raw stream reads an upstream's frames a read at a time: plain ``data:`` frames go on
as they came, and only the frames that may end the stream, report usage or carry an error
are looked at one by one. Against a real HTTP server on loopback that writes a scripted
body in scripted pieces, each piece its own read; every case is checked against what
reading frame by frame gives."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backends.base import Timeouts
from backends.openai.backend import OpenAICompatBackend, OpenAICompatSettings
from gateway.errors import UpstreamError
from gateway.protocol import ChatCompletionRequest


class ScriptedUpstream:
    """Answers every request with :attr:`pieces`, each written (chunked) on its own,
    with a pause after it so that the gateway reads it alone."""

    def __init__(self) -> None:
        self.pieces: Sequence[bytes] = ()
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.decode("latin-1").split("\r\n"):
                    name, _, value = line.partition(":")
                    if name.lower() == "content-length":
                        length = int(value)
                await reader.readexactly(length)
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"transfer-encoding: chunked\r\n\r\n"
                )
                for piece in self.pieces:
                    writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    await writer.drain()
                    await asyncio.sleep(0.002)
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


@pytest.fixture(scope="module")
async def scripted() -> AsyncIterator[tuple[ScriptedUpstream, OpenAICompatBackend]]:
    upstream = ScriptedUpstream()
    url = await upstream.start()
    settings_ = OpenAICompatSettings(
        backend="openai",
        name="up",
        model="upstream-model",
        base_url=url,
        timeouts=Timeouts(first_token_s=2, total_s=10),
    )
    backend = OpenAICompatBackend(settings_)
    await backend.start()
    yield upstream, backend
    await backend.aclose()
    await upstream.stop()


def chunk(content: str | None, finish: str | None = None, **extra: Any) -> bytes:
    delta = {} if content is None else {"content": content}
    body = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "upstream-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


USAGE = {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
USAGE_ONLY = (
    b'data: {"id":"c1","object":"chat.completion.chunk","created":1,'
    b'"model":"upstream-model","choices":[],"usage":' + json.dumps(USAGE).encode() + b"}\n\n"
)
DONE = b"data: [DONE]\n\n"
# OpenAI with include_usage: "usage": null on every chunk, then the usage-only chunk
OPENAI_STYLE = [
    *(chunk(f"w{i} ", usage=None) for i in range(3)),
    chunk(None, "stop", usage=None),
    USAGE_ONLY,
    DONE,
]


def request() -> ChatCompletionRequest:
    body = {"model": "public", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    return ChatCompletionRequest.model_validate(body)


async def relayed(
    scripted: tuple[ScriptedUpstream, OpenAICompatBackend], pieces: Sequence[bytes]
) -> tuple[list[bytes], Any]:
    """The frames the raw stream hands on (as written to a client), and the stream."""
    upstream, backend = scripted
    upstream.pieces = pieces
    stream = backend.chat_stream_raw(request())
    written = b"".join([piece async for piece in stream])
    assert written.endswith(b"\n\n") or not written
    return [f + b"\n\n" for f in written.split(b"\n\n") if f], stream


def public(frame: bytes) -> bytes:
    return frame.replace(b'"model":"upstream-model"', b'"model":"public"')


@pytest.mark.parametrize("split", ["one read", "a read per frame"])
async def test_openai_style_usage_is_taken_and_the_rest_passes(
    scripted: tuple[ScriptedUpstream, OpenAICompatBackend], split: str
) -> None:
    pieces = [b"".join(OPENAI_STYLE)] if split == "one read" else OPENAI_STYLE
    frames, stream = await relayed(scripted, pieces)
    assert frames == [public(f) for f in OPENAI_STYLE[:4]]  # no usage-only chunk, no [DONE]
    assert stream.usage.model_dump(exclude_none=True) == USAGE
    assert stream.usage_frame == public(USAGE_ONLY)


async def test_usage_on_the_finish_chunk_keeps_the_chunk(
    scripted: tuple[ScriptedUpstream, OpenAICompatBackend],
) -> None:
    finish = chunk(None, "stop", usage=USAGE)
    frames, stream = await relayed(scripted, [chunk("a") + chunk("b") + finish + DONE])
    assert frames == [public(chunk("a")), public(chunk("b")), public(finish)]
    assert stream.usage.completion_tokens == 4


async def test_comments_event_lines_and_crlf_in_a_read_of_plain_frames(
    scripted: tuple[ScriptedUpstream, OpenAICompatBackend],
) -> None:
    multi = b"event: message\ndata: " + chunk("b")[6:-2].replace(b',"', b',\ndata: "', 1)
    piece = chunk("a") + b": keep-alive\n\n" + multi + b"\n\n" + chunk(None, "stop") + DONE
    frames, stream = await relayed(scripted, [piece.replace(b"\n", b"\r\n")])
    rebuilt = b"data: " + chunk("b")[6:-2].replace(b',"', b',\n"', 1) + b"\n\n"
    assert frames == [public(chunk("a")), public(rebuilt), public(chunk(None, "stop"))]
    assert stream.usage.completion_tokens == 3  # no usage upstream: one token a frame


async def test_an_error_frame_after_plain_frames_raises_once_they_are_out(
    scripted: tuple[ScriptedUpstream, OpenAICompatBackend],
) -> None:
    upstream, backend = scripted
    error = b'data: {"error":{"message":"overloaded","code":503}}\n\n'
    upstream.pieces = [chunk("a") + chunk("b") + error + chunk("c")]
    out: list[bytes] = []
    with pytest.raises(UpstreamError):
        async for piece in backend.chat_stream_raw(request()):
            out.append(piece)
    assert b"".join(out) == public(chunk("a") + chunk("b"))


async def test_nothing_after_done_is_passed_on(
    scripted: tuple[ScriptedUpstream, OpenAICompatBackend],
) -> None:
    frames, _ = await relayed(scripted, [chunk("a") + chunk(None, "stop") + DONE + chunk("x")])
    assert frames == [public(chunk("a")), public(chunk(None, "stop"))]


async def test_text_that_looks_like_the_markers_passes_intact(
    scripted: tuple[ScriptedUpstream, OpenAICompatBackend],
) -> None:
    tricky = [chunk('say "error" [DONE]'), chunk("prompt_tokens"), chunk(None, "stop")]
    frames, stream = await relayed(scripted, [b"".join(tricky) + USAGE_ONLY + DONE])
    assert frames == [public(f) for f in tricky]
    assert stream.usage.prompt_tokens == 3


def reference(pieces: Sequence[bytes]) -> list[bytes]:
    """Frame by frame: what the client should get of a body (no CR, one data line each)."""
    events = b"".join(pieces).replace(b"\r\n", b"\n").split(b"\n\n")
    out = []
    for event in events:
        lines = [line for line in event.split(b"\n") if line.startswith(b"data:")]
        if not lines:
            continue
        data = b"\n".join(line[5:].removeprefix(b" ") for line in lines)
        if data == b"[DONE]":
            break
        if b'"choices":[]' in data and b'"usage":{' in data:
            continue
        out.append(b"data: " + data + b"\n\n")
    return out


FRAMES = st.lists(
    st.one_of(
        st.text(max_size=8).map(lambda text: chunk(text, usage=None)),
        st.text(max_size=8).map(chunk),
        st.just(b": keep-alive\n\n"),
        st.text(max_size=8).map(lambda text: chunk(text).replace(b',"', b',\ndata: "', 1)),
    ),
    max_size=12,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(frames=FRAMES, cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=6))
async def test_any_cut_into_reads_relays_what_frame_by_frame_reading_gives(
    scripted: tuple[ScriptedUpstream, OpenAICompatBackend], frames: list[bytes], cuts: list[int]
) -> None:
    body = b"".join([*frames, chunk(None, "stop"), USAGE_ONLY, DONE])
    edges = sorted({0, len(body), *(c for c in cuts if c < len(body))})
    pieces = [body[a:b] for a, b in itertools.pairwise(edges)]
    relayed_frames, stream = await relayed(scripted, pieces)
    assert relayed_frames == [public(f) for f in reference(pieces)]
    assert stream.usage.model_dump(exclude_none=True) == USAGE
