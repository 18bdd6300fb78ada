"""Responses of the generation endpoints as bare ASGI apps.

Handlers return these instead of framework ``Response`` objects: the bytes are final
already (serialised once, or passed through from the upstream), so nothing is left to
encode, and building the framework's response costs more than the rest of a small answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

from litestar.types import Receive, Scope, Send

JSON = "application/json"


class JSONBody:
    """A whole JSON answer."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, body: bytes, headers: Mapping[str, str], status: int = 200) -> None:
        self.body = body
        self.headers = headers
        self.status = status

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(self.body)).encode()),
            *((k.encode("latin-1"), v.encode("latin-1")) for k, v in self.headers.items()),
        ]
        await send({"type": "http.response.start", "status": self.status, "headers": headers})
        await send({"type": "http.response.body", "body": self.body, "more_body": False})


class EventStream:
    """An SSE response. While it is written, a watcher waits for the client to go away;
    if it does, writing stops at once: ``frames`` is cancelled wherever it waits (which
    closes the upstream stream) and closed."""

    __slots__ = ("frames", "headers")

    def __init__(self, frames: AsyncIterator[bytes], headers: Mapping[str, str]) -> None:
        self.frames = frames
        self.headers = headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [
            (b"content-type", b"text/event-stream"),
            *((k.encode("latin-1"), v.encode("latin-1")) for k, v in self.headers.items()),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        writer = asyncio.current_task()
        assert writer is not None
        state = _Watch()
        watcher = asyncio.ensure_future(_watch(receive, writer, state))
        try:
            async for chunk in self.frames:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            state.done = True
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not state.client_gone:
                raise
            writer.uncancel()  # our own cancellation: the client left, nothing more to do
        finally:
            state.done = True
            watcher.cancel()
            if watcher.done() and not watcher.cancelled():
                watcher.exception()  # a receive() that failed: nothing to do, but retrieve it
            close = getattr(self.frames, "aclose", None)
            if close is not None:
                await close()


class _Watch:
    __slots__ = ("client_gone", "done")

    def __init__(self) -> None:
        self.done = False
        self.client_gone = False


async def _watch(receive: Receive, writer: asyncio.Task[Any], state: _Watch) -> None:
    while not state.done:
        message = await receive()
        if message["type"] == "http.disconnect":
            if not state.done:
                state.client_gone = True
                writer.cancel()
            return
