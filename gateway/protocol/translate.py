"""A chat chunk stream, written as another API's server-sent events.

:class:`ChunkTranslator` reads the chunks of a stream dispatch opened (its first chunk has
arrived: the deployment answered), above the stream's survival: a stream resumed on
another deployment goes on in the same chunks. The opening events of the API go out with
the first chunk; a resume's marker (an SSE comment, as bytes) is passed on as it is.
Subclasses say what each chunk becomes (:meth:`feed`), what opens and closes the stream,
and the in-band error frames.
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

    def __init__(self, chunks: AsyncIterator[Any]) -> None:
        self._chunks = chunks
        self._started = False
        self._ended = False
        self.usage: Usage | None = None
        self.usage_frame: bytes | None = None  # the closing events carry the usage
        self.model: str | None = None

    def __aiter__(self) -> ChunkTranslator:
        return self

    async def __anext__(self) -> bytes:
        if self._ended:
            raise StopAsyncIteration
        frames: list[bytes] = []
        while not frames:
            chunk = await anext(self._chunks, None)
            if isinstance(chunk, bytes):  # a resume's marker
                return chunk
            if chunk is not None and not isinstance(chunk, ChatCompletionChunk):
                frames.extend(self.step(chunk))  # a step between a tool loop's rounds
                continue
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
        return b"".join(frames)

    async def aclose(self) -> None:
        close = getattr(self._chunks, "aclose", None)
        if close is not None:
            await close()

    def resume_with(self, chunks: AsyncIterator[Any]) -> None:
        """Go on reading ``chunks`` (a hosted tool loop's next round)."""
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

    def step(self, piece: Any) -> list[bytes]:
        """The events of a piece that is not a chunk (a step of the gateway's tool loop,
        :mod:`gateway.hosted.run`), for a translator that reads such a stream."""
        raise TypeError(f"a chunk stream carried {type(piece).__name__}")

    async def closing(self) -> list[bytes]:
        """The events that end a complete stream."""
        return []

    def failed(self, error: GatewayError) -> bytes:
        """The in-band frames of a failure after the first byte."""
        raise NotImplementedError
