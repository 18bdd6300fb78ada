"""A Gemini upstream's own stream, passed through: as it came for ``alt=sse``, else as the
elements of one JSON array, whatever the pieces it arrived in; a chat answer's usage and
finish reason in Gemini's terms."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from gateway.apis.gemini.answer import finish_reason, usage_metadata
from gateway.apis.gemini.codec import native_frames
from gateway.apis.gemini.events import Framing
from gateway.protocol import Usage

PIECES = (b'data: {"a": 1}\r\n\r\ndata: {"a"', b": 2}\r\n\r\n")


async def _pieces() -> AsyncIterator[bytes]:
    for piece in PIECES:
        yield piece


def _written(sse: bool) -> bytes:
    async def run() -> bytes:
        return b"".join([frame async for frame in native_frames(_pieces(), Framing(sse))])

    return asyncio.run(run())


def test_a_native_stream_as_events_or_as_a_json_array() -> None:
    assert _written(sse=True) == b"".join(PIECES)
    assert json.loads(_written(sse=False)) == [{"a": 1}, {"a": 2}]


def test_usage_counts_reasoning_and_cached_tokens_apart() -> None:
    usage = Usage.of(100, 30, cached_tokens=40)
    usage = Usage.model_validate(
        {**usage.model_dump(), "completion_tokens_details": {"reasoning_tokens": 12}}
    )
    assert usage_metadata(usage) == {
        "promptTokenCount": 100,
        "candidatesTokenCount": 18,
        "totalTokenCount": 130,
        "cachedContentTokenCount": 40,
        "thoughtsTokenCount": 12,
    }
    assert [finish_reason(r) for r in ("stop", "tool_calls", "length", "content_filter")] == [
        "STOP",
        "STOP",
        "MAX_TOKENS",
        "SAFETY",
    ]
