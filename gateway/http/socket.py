"""Operations over a WebSocket: the upgrade passes the edge as a request does (the key,
wherever the API's clients put it, a query parameter included; the key's share of the
open sockets), then each message passes it again (the operation's body bound, the key's
and the session's limits at admission) and gets its own access line.

What a message means is the API's (:class:`~gateway.apis.contract.Conversation`); a
call it makes runs the same request path as over HTTP (:mod:`gateway.http.serving`), its
frames written as one text message each. A socket silent for ``http.socket_idle_s`` is
closed; a refused upgrade is answered with the API's error at its HTTP status.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import structlog
from litestar.types import Receive, Scope, Send
from litestar.types.asgi_types import WebSocketResponseBodyEvent, WebSocketResponseStartEvent

from gateway.apis.contract import Api, Conversation, Decoded, Exchange, Operation, Reply
from gateway.errors import (
    GatewayError,
    InvalidRequestError,
    ModelNotFoundError,
    RequestTooLargeError,
)
from gateway.http.intake import credentials, header_map, query_map, taking_work
from gateway.http.middleware import CLIENT_GONE, note_refusal, record_request
from gateway.http.serving import admit, answer, settling
from gateway.http.spine import Spine
from gateway.http.unknown import list_served
from gateway.telemetry.propagation import new_request_id

log = structlog.get_logger("shunter.api")
_GOING_AWAY = 1001
_POLICY_VIOLATION = 1008


async def refuse_socket(scope: Scope, receive: Receive, send: Send, why: str) -> None:
    """Refuse an upgrade where the path takes no WebSocket (a 400 to the handshake)."""
    await receive()  # websocket.connect
    error = InvalidRequestError(why, code="websocket_not_supported")
    await _reject(scope, send, error, json.dumps(error.to_body()).encode(), error.status_code)


async def serve_socket(
    scope: Scope, receive: Receive, send: Send, api: Api, operation: Operation
) -> None:
    """One WebSocket connection of ``operation``, until the client closes it, stays silent
    too long, or the gateway shuts down."""
    spine: Spine = scope["app"].state.spine
    services = spine.services
    await receive()  # websocket.connect
    headers, query = header_map(scope), query_map(scope)
    try:
        taking_work(services.gateway)
        key = await services.admission.authenticate(credentials(headers, query, api.keys))
        spine.sockets.take(key.id)
    except GatewayError as exc:
        log.info(
            "websocket_refused", path=scope["path"], status=exc.status_code, reason=exc.message
        )
        status, body = api.errors(exc, exc.status_code, None)
        await _reject(scope, send, exc, body, status)
        return
    try:
        await send({"type": "websocket.accept", "subprotocol": None, "headers": []})
        opened = Exchange(services, key, b"", headers, "", {}, {}, query, "websocket", "GET")
        conversation = operation.socket(opened) if operation.socket is not None else None
        assert conversation is not None, "only an operation with a socket is upgraded"
        while (text := await _next_message(receive, spine.socket_idle_s)) is not None:
            await _message(scope, send, opened, conversation, operation, text)
        log.info("websocket_idle", path=scope["path"], key_id=key.id, idle_s=spine.socket_idle_s)
        await send({"type": "websocket.close", "code": _GOING_AWAY, "reason": "idle"})
    except _Closed:
        pass
    finally:
        spine.sockets.give_back(key.id)


async def _next_message(receive: Receive, idle_s: float) -> str | None:
    """The next message's text; ``None`` once the client stayed silent for ``idle_s``
    (:class:`_Closed` once it closed)."""
    try:
        async with asyncio.timeout(idle_s):
            message: Any = await receive()
    except TimeoutError:
        return None
    if message["type"] == "websocket.disconnect":
        raise _Closed
    text = message.get("text")
    if text is None:
        text = (message.get("bytes") or b"").decode(errors="replace")
    return str(text)


class _Closed(Exception):
    """The client closed the socket."""


async def _message(
    scope: Scope,
    send: Send,
    opened: Exchange,
    conversation: Conversation,
    operation: Operation,
    text: str,
) -> None:
    """Answer one client message, recorded as a request is (metrics, one access line)."""
    facts: dict[str, Any] = {"key_id": opened.key.id}
    request_id = new_request_id()
    exchange = Exchange(
        opened.services,
        opened.key,
        text.encode(),
        opened.headers,
        request_id,
        facts,
        {},
        opened.query,
        "websocket",
        "WEBSOCKET",
    )
    started, status = time.perf_counter(), 200
    try:
        if len(exchange.body) > operation.max_body:
            raise _too_large(operation.max_body)
        await _answer(send, conversation, exchange)
    except OSError:  # the server's ClientDisconnected: a write after the client left
        status, facts["client_gone"] = CLIENT_GONE, "disconnected"
        raise _Closed from None
    except GatewayError as exc:
        if isinstance(exc, ModelNotFoundError):
            list_served(exc, exchange.key)
        note_refusal(facts, exc)
        refused = conversation.error(exc)
        status = refused.status if refused.status != 200 else exc.status_code
        await _write(send, refused)
    finally:
        duration = time.perf_counter() - started
        record_request(
            scope["app"].state.telemetry,
            facts | {"request_id": request_id},
            status,
            duration,
            operation.name,
            "WEBSOCKET",
            scope["path"],
        )


async def _answer(send: Send, conversation: Conversation, exchange: Exchange) -> None:
    item = await conversation.message(exchange)
    if isinstance(item, Reply):
        await _write(send, item)
        return
    decoded: Decoded = item
    exchange.facts.update(model=decoded.model, stream=decoded.stream)
    admitted = await admit(exchange, decoded)
    reply = await answer(admitted, conversation)
    if reply.frames is not None:
        reply.frames = settling(reply.frames, admitted)
    await _write(send, reply)


async def _write(send: Send, reply: Reply) -> None:
    """A reply as text messages: each server-sent event's JSON, or the whole body."""
    if reply.frames is None:
        if reply.body:
            await _text(send, reply.body.decode())
        return
    frames = reply.frames
    try:
        async for chunk in frames:
            for data in _payloads(chunk):
                await _text(send, data)
    finally:  # closing the frames closes the upstream stream and settles the bill
        close = getattr(frames, "aclose", None)
        if close is not None:
            await close()


async def _text(send: Send, data: str) -> None:
    await send({"type": "websocket.send", "bytes": None, "text": data})


def _payloads(chunk: bytes) -> list[str]:
    """The JSON of each server-sent event in ``chunk`` (its ``data:`` lines)."""
    return [
        line[6:].decode()
        for line in chunk.split(b"\n")
        if line.startswith(b"data: ") and line != b"data: [DONE]"
    ]


def _too_large(limit: int) -> GatewayError:
    return RequestTooLargeError(
        f"The message is larger than {limit} bytes, the largest request this gateway takes."
    )


async def _reject(scope: Scope, send: Send, error: GatewayError, body: bytes, status: int) -> None:
    """Answer the handshake with ``error`` at its status, where the server can (else a
    close, which the server answers with 403)."""
    if "websocket.http.response" not in (scope.get("extensions") or {}):
        await send({"type": "websocket.close", "code": _POLICY_VIOLATION, "reason": None})
        return
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    headers += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in error.headers().items()]
    start: WebSocketResponseStartEvent = {
        "type": "websocket.http.response.start",
        "status": status,
        "headers": headers,
    }
    await send(start)
    done: WebSocketResponseBodyEvent = {
        "type": "websocket.http.response.body",
        "body": body,
        "more_body": False,
    }
    await send(done)
