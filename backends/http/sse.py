"""Streamed bodies as SSE events, without decoding them.

:class:`FrameBatches` holds the SSE frames of one streamed response, in batches:
:func:`iter_frame_blocks` cuts the bytes as they arrive after their last complete event,
and the helpers below read a block's events (:func:`frames_of`, :func:`data_events`,
:func:`frame_start`, :func:`last_frame`) or one event (:func:`data_frame`,
:func:`parse_event`) only as far as a backend needs. The connection itself is
:mod:`backends.http.upstream`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable

from backends.http.errors import timeout_error, transport_failures


class FrameBatches:
    """The SSE frames of one streamed response, in batches: the frames that one read of
    the socket completed (see :func:`iter_frame_blocks`), so that frames which arrived
    together can be written on together. Iterating gives each batch as a list of frames;
    :meth:`blocks` gives it as the bytes it arrived as."""

    def __init__(
        self,
        first: bytes,
        chunks: AsyncIterator[bytes],
        deployment: str,
        deadline: float | None,
        body_read: Callable[[], bool] | None = None,
    ) -> None:
        self._chunks = chunks
        self._blocks = iter_frame_blocks(first, chunks, deployment, deadline)
        self._batches: AsyncGenerator[list[bytes], None] | None = None
        self._body_read = body_read

    def __aiter__(self) -> AsyncIterator[list[bytes]]:
        if self._batches is None:
            self._batches = _batches_of(self._blocks)
        return self._batches

    def blocks(self) -> AsyncIterator[bytes]:
        """Each batch as one piece of bytes: whole events, ``\\n`` line ends, each event
        ending with its blank line (:func:`frames_of` splits one)."""
        return self._blocks

    async def finish(self, limit_s: float = 1.0) -> None:
        """The end marker was seen: read the rest so the connection goes back to the pool
        (nothing to read when ``body_read`` says the body has all arrived); a rest that
        takes longer than ``limit_s`` is dropped with the connection."""
        if self._batches is not None:
            await self._batches.aclose()
        await self._blocks.aclose()
        if self._body_read is None or not self._body_read():
            await drain(self._chunks, limit_s)
        elif isinstance(self._chunks, AsyncGenerator):
            await self._chunks.aclose()


async def iter_frame_blocks(
    first: bytes, chunks: AsyncIterator[bytes], deployment: str, deadline: float | None
) -> AsyncGenerator[bytes, None]:
    """A byte stream cut after its last complete SSE event, one piece per read that
    completed at least one: the events as they arrived (``\\r\\n`` made ``\\n``), the
    blank line ending each included. Nothing is split per event: frames relayed as they
    came cost a few byte searches per read, however many frames it held.

    ``deadline`` is a loop time; it is checked after every read (reads themselves are
    bounded by the client's read timeout), so a stream never runs far past ``total_s``.
    """
    loop = asyncio.get_running_loop()
    buffer = b""
    chunk = first
    while True:
        buffer = buffer + chunk if buffer else chunk
        if b"\r" in buffer:  # CRLF line ends, possibly split across reads
            buffer = buffer.replace(b"\r\n", b"\n")
        end = buffer.rfind(b"\n\n")
        if end >= 0:
            block, buffer = buffer[: end + 2], buffer[end + 2 :]
            yield block
        if deadline is not None and loop.time() > deadline:
            raise timeout_error(deployment, "stream exceeded its total timeout")
        next_chunk = await anext(chunks, None)
        if next_chunk is None:
            break
        chunk = next_chunk
    if buffer.strip():
        yield buffer.rstrip(b"\n") + b"\n\n"


async def _batches_of(blocks: AsyncIterator[bytes]) -> AsyncGenerator[list[bytes], None]:
    async for block in blocks:
        batch = frames_of(block)
        if batch:
            yield batch


def frames_of(block: bytes) -> list[bytes]:
    """The events of a block from :func:`iter_frame_blocks`, without their blank lines."""
    return [frame for frame in block.split(b"\n\n") if frame]


def data_events(block: bytes) -> int:
    """How many events ``block`` holds if they are all one-line ``data:`` events (OpenAI's
    shape), else 0: two byte counts, whatever the number of events. A 0 only means the
    block is to be looked at event by event."""
    if not block.startswith(b"data:") or not block.endswith(b"\n\n"):
        return 0
    # each blank line but the last is followed by the next event's "data:"; when those
    # blank lines hold every newline of the block, every event is one line
    events = block.count(b"\n\ndata:") + 1
    return events if block.count(b"\n") == 2 * events else 0


def frame_start(block: bytes, *markers: bytes) -> int:
    """Where the first event holding one of ``markers`` starts in ``block`` (a block from
    :func:`iter_frame_blocks`), or -1 when none does."""
    found = [at for marker in markers if (at := block.find(marker)) >= 0]
    return event_start(block, min(found)) if found else -1


def event_start(block: bytes, at: int) -> int:
    """Where the event holding position ``at`` of ``block`` starts."""
    start = block.rfind(b"\n\n", 0, at)
    return start + 2 if start >= 0 else 0


def last_frame(block: bytes) -> bytes:
    """The last event of a block from :func:`iter_frame_blocks`, without its blank line."""
    return block[event_start(block, len(block) - 2) : -2]


def block_of(frames: list[bytes]) -> bytes:
    """Events (without blank lines) as a block: :func:`frames_of` undone."""
    return b"\n\n".join(frames) + b"\n\n" if frames else b""


async def drain(chunks: AsyncIterator[bytes], limit_s: float = 1.0) -> None:
    """Read what is left of a body (after ``[DONE]``) so its connection can be reused.

    Failures and a slow tail are ignored: the answer is complete, and the response's
    close then drops the connection instead of pooling it.
    """
    with contextlib.suppress(*transport_failures()):
        async with asyncio.timeout(limit_s):
            async for _ in chunks:
                pass


def data_frame(frame: bytes) -> bytes | None:
    """``frame`` as one ``data: ...`` line (OpenAI's shape, returned as is), or ``None``.

    Frames with ``event:``, comment or several ``data`` lines are rebuilt as one line;
    frames without data (comments, keep-alives) give ``None``.
    """
    if frame.startswith(b"data:") and b"\n" not in frame:
        return frame
    _, data = parse_event(frame)
    return b"data: " + data.encode() if data else None


def parse_event(frame: bytes) -> tuple[str | None, str]:
    """``(event, data)`` of a general SSE frame; comment lines are skipped."""
    event: str | None = None
    data: list[str] = []
    for line in frame.decode("utf-8").split("\n"):
        if not line or line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            event = value
        elif field == "data":
            data.append(value)
    return event, "\n".join(data)
