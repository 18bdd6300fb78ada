"""Responses of the generation endpoints as bare ASGI apps, and the watch on their client.

Handlers return these instead of framework ``Response`` objects: the bytes are final
already (serialised once, or passed through from the upstream), so nothing is left to
encode, and building the framework's response costs more than the rest of a small answer.

:class:`ClientWatch` stops the work of a request whose client is gone: it disconnected,
or it stopped reading and a write waited longer than the send timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

from litestar.types import Message, Receive, Scope, Send

JSON = "application/json"
EVENTS = "text/event-stream"
GONE = "shunter.client_gone"
"""The scope extension through which the server reports a lost connection: a dict in which
a watch puts a ``"callback"``, called when the connection is lost while the request runs;
the server sets ``"lost"`` in it then, whether a watch was there or not (a client gone
before its watch began, or during a request no watch serves)."""


BODY_DEADLINE = "shunter.body_deadline"
"""The scope extension through which a route gives its request's body a deadline of its
own: a dict in which the route puts ``"timeout_s"``, counted from the body's first bytes,
in place of the server's ``body_timeout_s`` (a KV state of gigabytes takes longer to
arrive than any JSON body)."""


def longer_body_deadline(scope: Scope, timeout_s: float) -> None:
    """Let this request's body arrive within ``timeout_s`` (see :data:`BODY_DEADLINE`)."""
    hook = (scope.get("extensions") or {}).get(BODY_DEADLINE)
    if hook is not None:
        hook["timeout_s"] = timeout_s


def lost(scope: Scope) -> bool:
    """Whether the server reported the request's connection lost before its answer was
    complete."""
    return bool((scope.get("extensions") or {}).get(GONE, {}).get("lost"))


class JSONBody:
    """A whole JSON answer."""

    __slots__ = ("body", "headers", "media_type", "status")

    def __init__(
        self, body: bytes, headers: Mapping[str, str], status: int = 200, media_type: str = JSON
    ) -> None:
        self.body = body
        self.headers = headers
        self.status = status
        self.media_type = media_type

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [
            (b"content-type", self.media_type.encode("latin-1")),
            (b"content-length", str(len(self.body)).encode()),
            *((k.encode("latin-1"), v.encode("latin-1")) for k, v in self.headers.items()),
        ]
        await send({"type": "http.response.start", "status": self.status, "headers": headers})
        await send({"type": "http.response.body", "body": self.body, "more_body": False})


class EventStream:
    """An SSE response: ``frames`` written as they come, then closed (which closes the
    upstream stream), also when writing stops early. Run it under a :class:`ClientWatch`
    so that a client that leaves or stops reading stops the stream."""

    __slots__ = ("frames", "headers", "media_type")

    def __init__(
        self, frames: AsyncIterator[bytes], headers: Mapping[str, str], media_type: str = EVENTS
    ) -> None:
        self.frames = frames
        self.headers = headers
        self.media_type = media_type

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [
            (b"content-type", self.media_type.encode("latin-1")),
            *((k.encode("latin-1"), v.encode("latin-1")) for k, v in self.headers.items()),
        ]
        try:
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            async for chunk in self.frames:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            close = getattr(self.frames, "aclose", None)
            if close is not None:
                await close()


class ClientWatch:
    """Cancels the task serving a request when its client is gone.

    Started once the request body has been read, it waits on the ASGI receive channel:
    ``http.disconnect`` cancels the serving task wherever it waits (a backend call, a
    queue, the next chunk of a stream), which closes the upstream or engine work. Writes
    go through :meth:`send`; one that the client does not take within ``send_timeout_s``
    (it stopped reading, and the socket buffers are full) cancels the task the same way.
    :attr:`gone` says which happened: ``"disconnected"`` or ``"send_timeout"``.

    The serving task catches that cancellation (``gone`` set) and returns; :meth:`stop`
    ends the watch and takes the cancellation back, so nothing of it leaks further.

    Under the gateway's own server the connection's loss is reported through the
    :data:`GONE` scope extension, so the watch costs no task. Elsewhere a watcher task
    waits on ``receive``; it is never cancelled: the server answers its pending
    ``receive`` with ``http.disconnect`` once the response is complete or the connection
    is gone (as ASGI says), and it ends there. Cancelling it instead would cost every
    request a traceback and leave a reference cycle for the garbage collector.
    """

    __slots__ = (
        "_done",
        "_hook",
        "_loop",
        "_receive",
        "_send",
        "_since",
        "_task",
        "_timeout",
        "_timer",
        "_watcher",
        "gone",
    )

    def __init__(self, receive: Receive, send: Send, send_timeout_s: float) -> None:
        self._receive = receive
        self._send = send
        self._timeout = send_timeout_s
        self._loop = asyncio.get_running_loop()
        self._task: asyncio.Task[object] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._since: float | None = None
        self._done = False
        self._hook: dict[Any, Any] | None = None
        self.gone: str | None = None

    def start(self, scope: Scope) -> None:
        """Watch on behalf of the task that calls this."""
        self._task = asyncio.current_task()
        hook = (scope.get("extensions") or {}).get(GONE)
        if hook is not None:
            self._hook = hook
            hook["callback"] = self._disconnected
            if hook.get("lost"):  # gone while the request was read or admitted
                self._disconnected()
        else:
            self._watcher = self._loop.create_task(self._watch())

    async def send(self, message: Message) -> None:
        """The ASGI ``send``, bounded by the send timeout."""
        self._since = self._loop.time()
        if self._timer is None:
            self._timer = self._loop.call_later(self._timeout, self._check)
        try:
            await self._send(message)
        finally:
            self._since = None

    def stop(self) -> None:
        """End the watch; call it from the serving task, in a ``finally``."""
        self._done = True
        self._watcher = None  # it ends on its own (see above)
        if self._hook is not None:
            self._hook.pop("callback", None)
            self._hook = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.gone is not None and self._task is not None:
            self._task.uncancel()  # our own cancellation, delivered and handled
        self._task = None

    async def _watch(self) -> None:
        while not self._done:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                self._disconnected()
                return

    def _disconnected(self) -> None:
        self._cancel("disconnected")

    def _check(self) -> None:
        self._timer = None
        if self._done:
            return
        since, now = self._since, self._loop.time()
        if since is not None and now - since >= self._timeout:
            self._cancel("send_timeout")
            return
        wait = self._timeout if since is None else self._timeout - (now - since)
        self._timer = self._loop.call_later(wait, self._check)

    def _cancel(self, reason: str) -> None:
        # the loop runs one thing at a time: while _done is False the serving task is
        # suspended inside the watched region, so the cancellation lands there
        if self._done or self.gone is not None or self._task is None:
            return
        self.gone = reason
        self._task.cancel()
