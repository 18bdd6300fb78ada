"""A Gemini upstream's own stream, passed through: as it came for ``alt=sse``, else as the
elements of one JSON array, whatever the pieces it arrived in."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from gateway.apis.gemini.codec import native_frames
from gateway.apis.gemini.events import Framing

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
