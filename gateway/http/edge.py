"""Limits below the application: the HTTP/1.1 protocol that every connection speaks.

uvicorn's httptools protocol, with the bounds a careful reverse proxy would set:

* the request head (request line and headers) is at most ``max_header_bytes``; past that
  the answer is 431 and the connection closes, before the parser buffers any more;
* the head must arrive within ``header_timeout_s`` of the connection opening, or of the
  first byte of a kept-alive connection's next request (408, then closed; a connection that
  never sent a byte is closed silently);
* a request body must arrive whole within ``body_timeout_s`` of its head (408, closed):
  a body trickled a byte at a time cannot hold its buffer for longer than that. A route
  may give its own body a longer deadline (:data:`~gateway.http.asgi.BODY_DEADLINE`):
  only the KV import of a worker does, with its ``kv_move_timeout_s``;
* a request answered before its body arrived whole (a 401 read from its headers) is
  answered with ``Connection: close`` and the connection ends with the answer, as after
  any refusal: the rest of the body is discarded, never parsed, and the connection is the
  first to go when a new one needs room, so trickled bodies cannot hold the places;
* at most ``max_connections`` connections are open. At the cap, a new connection takes the
  place of the one idle longest (idle: no request running, whether before its first head is
  complete or between requests); when every connection has a request running, the new one
  gets 503 and is closed at once, so silent connections cannot use up file descriptors;
* at most ``max_in_flight`` requests run at once; more get 503 with ``retry-after``;
* a connection upgraded to a WebSocket (the Responses API's, ``GET /v1/responses``) keeps
  its place among the open connections until it closes (the spine bounds how many one key
  and all keys hold, and closes a silent one: :mod:`gateway.http.socket`); a message is at
  most a request body's bound (and a little: the spine answers a message past the body's
  bound with an error, past this the socket closes with 1009), a message sent in
  fragments must arrive whole within ``body_timeout_s`` of its first (else the socket
  closes with 1008), and it is pinged so that a vanished client is noticed. The query
  string of an upgrade (which may carry a key) is never logged.

Refusals are OpenAI-shaped JSON built from :mod:`gateway.errors`. Everything is counted in
callbacks uvicorn makes anyway: a request costs a few attribute updates, plus a timer only
when its head or body spans several reads.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

import structlog
import uvicorn
from uvicorn._types import ASGI3Application
from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from uvicorn.server import ServerState

from gateway.apis.contract import MAX_BODY_BYTES
from gateway.errors import GatewayError, InvalidRequestError, ServiceUnavailableError
from gateway.http.asgi import BODY_DEADLINE, GONE, JSONBody

log = structlog.get_logger("shunter.edge")
_WARN_EVERY_S = 60.0  # an attack must not flood the log: one line per kind per minute
# after a refusal, how long to read and discard what the client still sends: closing with
# unread data resets the connection, and the client could lose the answer; a client that
# keeps sending after the answer is cut off sooner
_LINGER_S = 2.0
_LINGER_BYTES = 1 << 20


@dataclass(frozen=True)
class EdgeLimits:
    """What one connection, and all of them together, may hold of the server."""

    max_header_bytes: int = 64 * 1024
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_connections: int = 2048
    max_in_flight: int = 1024


_BODY_WINDOW = 1 << 20  # bytes of request body read ahead of the app


class Edge:
    """What the connections of one server share: their count, the idle ones, the refusals."""

    def __init__(self, limits: EdgeLimits) -> None:
        self.limits = limits
        self.open = 0
        # idle connections, longest idle first: the ones to close when a new one needs room
        self.idle: OrderedDict[EdgeProtocol, None] = OrderedDict()
        self._warned: dict[str, float] = {}
        self.too_large = _refusal(
            431,
            InvalidRequestError(
                f"The request line and headers are larger than {limits.max_header_bytes} "
                "bytes; send less in headers (the request body has its own limit).",
                code="request_header_fields_too_large",
            ),
        )
        self.head_late = _refusal(
            408,
            InvalidRequestError(
                f"The request headers did not arrive within {limits.header_timeout_s:g}s.",
                code="request_timeout",
            ),
        )
        self.body_late = _refusal(
            408,
            InvalidRequestError(
                f"The request body did not arrive within {limits.body_timeout_s:g}s of "
                "its headers.",
                code="request_timeout",
            ),
        )
        self.full = _refusal(
            503,
            ServiceUnavailableError(
                "This gateway has too many open connections; retry shortly.",
                retry_after=1.0,
            ),
        )
        busy = ServiceUnavailableError(
            "This gateway has too many requests in flight; retry shortly.", retry_after=1.0
        )
        self.busy_app = cast(
            ASGI3Application,
            JSONBody(json.dumps(busy.to_body()).encode(), _closing(busy), busy.status_code),
        )

    def make_room(self) -> bool:
        """Close the connection idle longest; False when every connection is busy."""
        while self.idle:
            victim, _ = self.idle.popitem(last=False)
            if victim.drop():
                return True
        return False

    def warn(self, event: str, **facts: Any) -> None:
        now = time.monotonic()
        if now - self._warned.get(event, -math.inf) >= _WARN_EVERY_S:
            self._warned[event] = now
            log.warning(event, **facts)


MAX_MESSAGE_BYTES = MAX_BODY_BYTES + (1 << 20)


class EdgeConfig(uvicorn.Config):
    """uvicorn's settings with :class:`EdgeProtocol`, and the state its connections share."""

    def __init__(self, app: Any, limits: EdgeLimits, **kwargs: Any) -> None:
        kwargs.setdefault("ws_max_size", MAX_MESSAGE_BYTES)
        super().__init__(app, http=EdgeProtocol, ws=EdgeWebSocket, **kwargs)
        self.edge = Edge(limits)
        logging.getLogger("uvicorn.error").addFilter(_no_query)


def _no_query(record: logging.LogRecord) -> bool:
    """uvicorn's WebSocket lines without the query string, which may carry a key."""
    if isinstance(record.msg, str) and '"WebSocket %s"' in record.msg:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 2 and isinstance(args[1], str):
            record.args = (args[0], args[1].partition("?")[0], *args[2:])
    return True


class EdgeWebSocket(WebSocketsSansIOProtocol):
    """uvicorn's WebSocket protocol on a connection :class:`EdgeProtocol` upgraded: it
    holds the connection's place among the open ones until it closes, and a message in
    fragments must be whole within the body's deadline."""

    _message_timer: asyncio.TimerHandle | None = None

    def connection_lost(self, exc: Exception | None) -> None:
        if isinstance(self.config, EdgeConfig):
            self.config.edge.open -= 1
        self._stop_message_timer()
        super().connection_lost(exc)

    def handle_text(self, event: Any) -> None:
        self._fragment(event.fin)
        super().handle_text(event)

    def handle_bytes(self, event: Any) -> None:
        self._fragment(event.fin)
        super().handle_bytes(event)

    def handle_cont(self, event: Any) -> None:
        self._fragment(event.fin)
        super().handle_cont(event)

    def _fragment(self, fin: bool) -> None:
        """Time a message sent in fragments from its first one; stop once it is whole."""
        if fin:
            self._stop_message_timer()
        elif self._message_timer is None and isinstance(self.config, EdgeConfig):
            deadline = self.config.edge.limits.body_timeout_s
            self._message_timer = self.loop.call_later(deadline, self._message_late)

    def _message_late(self) -> None:
        self._message_timer = None
        if self.frames and not self.transport.is_closing():
            edge = self.config.edge if isinstance(self.config, EdgeConfig) else None
            if edge is not None:
                edge.warn("websocket_message_late", effect="the socket is closed (1008)")
            self.frames = []
            self.conn.fail(1008, "message not whole in time")
            self.transport.write(b"".join(self.conn.data_to_send()))
            self.transport.close()

    def _stop_message_timer(self) -> None:
        if self._message_timer is not None:
            self._message_timer.cancel()
            self._message_timer = None


class EdgeProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, bounded as the module docstring says."""

    def __init__(
        self,
        config: uvicorn.Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        if not isinstance(config, EdgeConfig):
            raise TypeError("EdgeProtocol runs under an EdgeConfig")
        self.edge = config.edge
        self._in_head = True  # reading a request head, or waiting for one
        self._head_bytes = 0  # bytes received since the head began
        self._refused = False  # answered and closing: ignore whatever the parser still sees
        self._discarded = 0
        self._close_after_answer = False  # answered before its body came: ends after it
        self._counted = False
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._body_since = 0.0  # when the body's first bytes came

    # -- connections -----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        edge = self.edge
        if edge.open >= edge.limits.max_connections and not edge.make_room():
            edge.warn("connections_full", open=edge.open, effect="new connections get 503")
            # no lingering here: a flood of connections must not hold descriptors
            self._refused = True
            transport.write(edge.full)
            transport.close()
            return
        edge.open += 1
        self._counted = True
        edge.idle[self] = None
        self._head_timer = self.loop.call_later(edge.limits.header_timeout_s, self._head_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        self._release()
        cycle = self.cycle
        super().connection_lost(exc)
        if cycle is not None and not cycle.response_complete:
            hook = (cycle.scope.get("extensions") or {}).get(GONE, {})
            hook["lost"] = True  # the access line says 499, watched or not
            callback = hook.get("callback")
            if callable(callback):
                callback()

    def drop(self) -> bool:
        """Close this idle connection to make room; False if it was closing already."""
        closing = self.transport.is_closing()
        self._refused = True
        self._release()
        if not closing:
            self.transport.close()
        return not closing

    def _release(self) -> None:
        if self._counted:
            self._counted = False
            self.edge.open -= 1
        self.edge.idle.pop(self, None)
        self._stop_timers()

    def _stop_timers(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _refuse(self, response: bytes) -> None:
        """Answer ``response`` (if any) and end the connection; the parser's later callbacks
        are ignored. After an answer the connection lingers, reading and discarding, for
        up to ``_LINGER_S`` and ``_LINGER_BYTES``; it still counts, and is the first to go
        to make room."""
        self._refused = True
        transport = self.transport
        if transport.is_closing():
            self._release()
            return
        if not response:
            self._release()
            transport.close()
            return
        self._stop_timers()
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            # the request's app stops now, and cannot write after this answer
            cycle.disconnected = True
            cycle.message_event.set()
        transport.write(response)
        self._linger()

    def _linger(self) -> None:
        """The answer is written: end the connection, reading and discarding for a while
        (the first connection to go when a new one needs room)."""
        self._stop_timers()
        transport = self.transport
        if transport.can_write_eof():
            transport.write_eof()
        self.loop.call_later(_LINGER_S, transport.close)
        if self._counted:
            self.edge.idle[self] = None
            self.edge.idle.move_to_end(self, last=False)

    # -- reading ---------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self._refused:
            self._discarded += len(data)
            if self._discarded > _LINGER_BYTES:
                self.transport.close()
            return
        if self._in_head:
            self._head_bytes += len(data)
        super().data_received(data)
        if self._refused or self.transport.is_closing():
            return
        limits = self.edge.limits
        if self._in_head:
            if self._head_bytes > limits.max_header_bytes:
                self._refuse(self.edge.too_large)
            elif self._head_timer is None and self._head_bytes and self._between_requests():
                self._head_timer = self.loop.call_later(
                    limits.header_timeout_s, self._head_timed_out
                )
        elif self._body_timer is None:
            self._body_since = self.loop.time()
            self._body_timer = self.loop.call_later(limits.body_timeout_s, self._body_timed_out)

    def on_headers_complete(self) -> None:
        self._in_head = False
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        # the count may include body bytes that came in the same read: measure only then
        limit = self.edge.limits.max_header_bytes
        if self._head_bytes > limit and self._head_size() > limit:
            self._refuse(self.edge.too_large)
            return
        self.edge.idle.pop(self, None)
        # the request's watch learns of a lost connection from here, without a task
        self.scope["extensions"] = {GONE: {}, BODY_DEADLINE: {}}
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        # uvicorn pauses reading once 64 KB of body wait for the app, which then resumes
        # it: a round trip through the loop (and a copy of the window) per 64 KB. The
        # body is read whole anyway (up to the body limit), so the window is 1 MB.
        cycle = self.cycle
        upgrading = self.parser.should_upgrade() and self._should_upgrade()
        if self._refused or upgrading or cycle.response_complete:
            return
        cycle.body += body
        if len(cycle.body) > _BODY_WINDOW:
            self.flow.pause_reading()
        cycle.message_event.set()

    def on_message_complete(self) -> None:
        if self._refused:
            return
        self._in_head = True
        self._head_bytes = 0
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        super().on_message_complete()

    # -- requests --------------------------------------------------------------------------
    def _start_asgi_task(self, cycle: RequestResponseCycle, app: ASGI3Application) -> None:
        edge = self.edge
        if len(self.tasks) >= edge.limits.max_in_flight:
            edge.warn("in_flight_full", tasks=len(self.tasks), effect="new requests get 503")
            app = edge.busy_app
        if cycle.more_body:  # its body is still to come: it may be answered before that
            cycle.send = self._closing_if_unread(cycle)  # type: ignore[method-assign,assignment]
        super()._start_asgi_task(cycle, app)

    def handle_websocket_upgrade(self) -> None:
        # the connection's place passes to the WebSocket protocol, which gives it back
        self._counted = False
        self.edge.idle.pop(self, None)
        self._stop_timers()
        super().handle_websocket_upgrade()

    def _closing_if_unread(self, cycle: RequestResponseCycle) -> Callable[[Any], Awaitable[None]]:
        """``cycle.send``, but an answer that starts before the request's body arrived
        whole says ``Connection: close``, and the connection ends with it (see
        :meth:`on_response_complete`) instead of waiting for a body nobody will use.

        It holds the cycle and this protocol weakly: set as the cycle's own ``send``, a
        strong hold would make a reference cycle of every such request, which only the
        garbage collector (run rarely by the server) would free."""
        send = type(cycle).send
        cycle_ref, protocol_ref = weakref.ref(cycle), weakref.ref(self)

        async def send_closing(message: Any) -> None:
            held, protocol = cycle_ref(), protocol_ref()
            if held is None or protocol is None:
                return  # the request is over: nothing is written for it any more
            if not (held.more_body and message["type"] == "http.response.start"):
                await send(held, message)
                return
            headers = [*message.get("headers", ()), (b"connection", b"close")]
            closing: Any = {**message, "headers": headers}
            await send(held, closing)
            # the header is written; the connection's end is this protocol's, not uvicorn's
            # (which would close at once, and reset a client still sending)
            held.keep_alive = True
            protocol._close_after_answer = True

        return send_closing

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._close_after_answer and not self._refused:
            self._refused = True  # the rest of the body is discarded, never parsed
            self._linger()
            return
        idle = self._in_head and not self._refused and self._between_requests()
        if idle and self._counted and not self.transport.is_closing():
            self.edge.idle[self] = None

    # -- timers ----------------------------------------------------------------------------
    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._in_head and not self._refused:
            # a connection that never said anything gets no answer, as at keep-alive's end
            self._refuse(self.edge.head_late if self._head_bytes else b"")

    def _body_timed_out(self) -> None:
        self._body_timer = None
        if self._in_head or self._refused:
            return
        extensions: dict[str, Any] = self.scope.get("extensions") or {}
        own: float = extensions.get(BODY_DEADLINE, {}).get("timeout_s", 0.0)
        left = own - (self.loop.time() - self._body_since)
        if left > 0:  # the route gave its body longer
            self._body_timer = self.loop.call_later(left, self._body_timed_out)
            return
        answered = self.cycle is not None and self.cycle.response_started
        self._refuse(b"" if answered else self.edge.body_late)

    def _between_requests(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _head_size(self) -> int:
        """The head's size as sent, near enough: request line and header lines."""
        size = len(self.url) + 16  # method, spaces, HTTP version, line ends
        for name, value in self.headers:
            size += len(name) + len(value) + 4
        return size


def _closing(error: GatewayError) -> dict[str, str]:
    return {**error.headers(), "connection": "close"}


def _refusal(status: int, error: GatewayError) -> bytes:
    """A whole HTTP/1.1 response that ends the connection, written before any app runs."""
    body = json.dumps(error.to_body()).encode()
    headers = {
        "content-type": "application/json",
        "content-length": str(len(body)),
        **_closing(error),
    }
    lines = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return STATUS_LINE[status] + lines.encode("latin-1") + b"\r\n" + body
