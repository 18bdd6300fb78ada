"""Streams as SSE frames (what the HTTP layer writes, whichever backend produced them),
or as chat chunks (what another API's encoder reads).

A :class:`FrameStream` yields ``data: {chunk}\\n\\n`` frames and, once exhausted, holds the
stream's ``usage`` and its usage-only frame, so the gateway can account for every stream
and send the usage frame only to clients that asked for it. Backends that can pass their
upstream's bytes through (``chat_stream_raw``) skip parsing and re-serialising each chunk;
the others' chunks are framed by :class:`Framed`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any, Protocol, TypeVar

from pydantic import ValidationError

from gateway.errors import UpstreamError, UpstreamTimeoutError
from gateway.protocol import ChatCompletionChunk, Usage
from gateway.protocol.sse import frame

T_co = TypeVar("T_co", covariant=True)


class Stream(Protocol[T_co]):
    """A stream of an answer's pieces (SSE frames, or chat chunks) that knows its usage
    once it is exhausted."""

    @property
    def usage(self) -> Usage | None:
        """The stream's usage, once it is exhausted."""
        ...

    @property
    def usage_frame(self) -> bytes | None:
        """The usage-only chunk as a frame, once the stream is exhausted."""
        ...

    def __aiter__(self) -> AsyncIterator[T_co]: ...

    async def __anext__(self) -> T_co: ...

    async def aclose(self) -> None: ...


FrameStream = Stream[bytes]
"""SSE frames, written as they are."""


class Framed:
    """Frames a backend's chunk stream; the closing usage-only chunk is held back."""

    def __init__(self, chunks: AsyncIterator[Any]) -> None:
        """``chunks``: ChatCompletionChunk or Completion models (dicts in :class:`DictFramed`)."""
        self._chunks = chunks
        self.usage: Usage | None = None
        self.usage_frame: bytes | None = None

    def __aiter__(self) -> Framed:
        return self

    async def __anext__(self) -> bytes:
        chunk = await anext(self._chunks)
        while chunk.usage is not None and not chunk.choices:
            self.usage, self.usage_frame = chunk.usage, frame(chunk)
            chunk = await anext(self._chunks)
        return frame(chunk)

    async def aclose(self) -> None:
        close = getattr(self._chunks, "aclose", None)
        if close is not None:
            await close()


class DictFramed(Framed):
    """Frames chunks that arrive as JSON-ready dicts (an in-process engine's own OpenAI
    layer): each is written with ``json.dumps``, without validating it into a model first.
    The closing usage-only chunk is held back, as in :class:`Framed`."""

    def __init__(self, chunks: AsyncIterator[dict[str, Any]], deployment: str) -> None:
        super().__init__(chunks)
        self._deployment = deployment

    async def __anext__(self) -> bytes:
        chunk = await anext(self._chunks)
        while chunk.get("usage") is not None and not chunk.get("choices"):
            try:
                self.usage = Usage.model_validate(chunk["usage"])
            except ValidationError:
                raise UpstreamError(f"deployment {self._deployment!r} sent invalid usage") from None
            self.usage_frame = _json_frame(chunk)
            chunk = await anext(self._chunks)
        return _json_frame(_with_required_keys(chunk))


def _with_required_keys(chunk: dict[str, Any]) -> dict[str, Any]:
    """The chunk with the keys OpenAI's chunk schema requires even when ``null``: the engine's
    chunks arrive with every ``null`` dropped (``finish_reason`` until the last chunk, a
    logprobs object's ``refusal``)."""
    for choice in chunk.get("choices") or ():
        choice.setdefault("finish_reason", None)
        logprobs = choice.get("logprobs")
        if isinstance(logprobs, dict):
            logprobs.setdefault("content", None)
            logprobs.setdefault("refusal", None)
    return chunk


def _json_frame(chunk: dict[str, Any]) -> bytes:
    return (
        b"data: " + json.dumps(chunk, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"
    )


class Chunks:
    """A backend's chat chunks as they come (the usage-only one too), for an encoder that
    turns them into another API's events. Each chunk with choices is kept while
    :attr:`delivered` is a list, so that a resume can read back what was delivered; a
    resume goes on with its continuation in place of the failed source
    (:meth:`resume_with`)."""

    def __init__(self, chunks: AsyncIterator[ChatCompletionChunk]) -> None:
        self._chunks = chunks
        self.usage: Usage | None = None
        self.usage_frame: bytes | None = None
        self.delivered: list[ChatCompletionChunk] | None = []

    def __aiter__(self) -> Chunks:
        return self

    async def __anext__(self) -> ChatCompletionChunk:
        chunk = await anext(self._chunks)
        if chunk.usage is not None:
            self.usage = chunk.usage
        if chunk.choices and self.delivered is not None:
            self.delivered.append(chunk)
        return chunk

    def resume_with(self, chunks: AsyncIterator[ChatCompletionChunk]) -> None:
        """Go on with ``chunks`` in place of a source that failed mid-stream (the caller
        closes the failed one)."""
        self._chunks = chunks

    async def aclose(self) -> None:
        close = getattr(self._chunks, "aclose", None)
        if close is not None:
            await close()


class Wrapped:
    """Base of a stream that watches another: its usage is the inner stream's."""

    _inner: Stream[Any]

    @property
    def inner(self) -> Stream[Any]:
        """The stream this one watches."""
        return self._inner

    @property
    def usage(self) -> Usage | None:
        return self._inner.usage

    @property
    def usage_frame(self) -> bytes | None:
        return self._inner.usage_frame


class Deadline(Wrapped):
    """Ends a frame stream with a timeout error (sent in-band) past ``total_s``."""

    def __init__(self, inner: Stream[Any], total_s: float, deployment: str) -> None:
        self._inner = inner
        self._total_s = total_s
        self._deadline = time.monotonic() + total_s
        self._deployment = deployment

    def __aiter__(self) -> Deadline:
        return self

    async def __anext__(self) -> Any:
        remaining = self._deadline - time.monotonic()
        try:
            if remaining <= 0:
                raise TimeoutError
            async with asyncio.timeout(remaining):
                return await anext(self._inner)
        except TimeoutError as exc:
            raise UpstreamTimeoutError(
                f"deployment {self._deployment!r} exceeded {self._total_s:g}s"
            ) from exc

    async def aclose(self) -> None:
        await self._inner.aclose()
