"""A backend's chat chunk stream, written as another API's server-sent events.

:class:`ChunkTranslator` is a :class:`~gateway.protocol.frames.FrameStream`: dispatch pulls
its first frame to decide that a deployment has answered, so nothing is written before the
upstream's first chunk has arrived (retries and fallback stay possible until then); the
opening events of the API go out with that first chunk. A source that fails mid-stream can
be replaced by its continuation (:meth:`ChunkTranslator.resume_with`). Subclasses say what
each chunk becomes (:meth:`feed`), what opens and closes the stream, and the in-band error
frames.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from gateway.errors import GatewayError
from gateway.protocol import ChatCompletionChunk, Usage


def sse(event: str, data: dict[str, Any]) -> bytes:
    """One named server-sent event."""
    payload = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return b"event: %s\ndata: %s\n\n" % (event.encode(), payload.encode())


class ChunkTranslator:
    """Frames of another API over chat chunks; ``usage`` is known once it is exhausted."""

    def __init__(self, chunks: AsyncIterator[ChatCompletionChunk]) -> None:
        self._chunks = chunks
        self._started = False
        self._ended = False
        self.usage: Usage | None = None
        self.usage_frame: bytes | None = None  # the closing events carry the usage
        self.model: str | None = None
        self.delivered: list[ChatCompletionChunk] | None = []
        """The chunks turned into events so far, for a stream that may be resumed
        (:mod:`gateway.dispatch.midstream.resume`); set to ``None`` to keep none."""

    def __aiter__(self) -> ChunkTranslator:
        return self

    async def __anext__(self) -> bytes:
        if self._ended:
            raise StopAsyncIteration
        frames: list[bytes] = []
        while not frames:
            chunk = await anext(self._chunks, None)
            if chunk is not None:
                self.model = chunk.model
                if chunk.usage is not None:
                    self.usage = chunk.usage
            if not self._started:
                self._started = True
                frames.extend(self.opening())
            if chunk is None:
                self._ended = True
                frames.extend(await self.closing())
                break
            if chunk.choices:
                frames.extend(self.feed(chunk))
                if self.delivered is not None:
                    self.delivered.append(chunk)
        return b"".join(frames)

    async def aclose(self) -> None:
        close = getattr(self._chunks, "aclose", None)
        if close is not None:
            await close()

    def resume_with(self, chunks: AsyncIterator[ChatCompletionChunk]) -> None:
        """Go on with ``chunks`` in place of a source that failed mid-stream: the events
        continue as if one source had sent both (the caller closes the failed one)."""
        self._chunks = chunks

    async def drain(self) -> list[bytes]:
        """Every frame, for a whole answer replayed as a stream (a cache hit)."""
        return [frame async for frame in self]

    # --- what subclasses say ------------------------------------------------------------

    def opening(self) -> list[bytes]:
        """The events that open the stream, sent with the first chunk's."""
        return []

    def feed(self, chunk: ChatCompletionChunk) -> list[bytes]:
        """The events of one chunk that has choices."""
        raise NotImplementedError

    async def closing(self) -> list[bytes]:
        """The events that end a complete stream."""
        return []

    def failed(self, error: GatewayError) -> bytes:
        """The in-band frames of a failure after the first byte."""
        raise NotImplementedError
