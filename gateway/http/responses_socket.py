"""Responses over a WebSocket: ``GET /v1/responses`` upgraded, as OpenAI's WebSocket mode.

The client sends ``response.create`` messages (the body of ``POST /v1/responses``;
``stream`` is implied); each runs on the same request path as a streamed POST (key,
limits, routing, fallback, billing), and its events come back one JSON text message each,
in the same order. One response runs at a time; a message sent meanwhile waits.

Continuation: the socket keeps the conversation of its most recent response, so a
``previous_response_id`` naming it continues without the store, also under
``store: false``; any other id is read from the stored responses as over HTTP, and one
that is in neither is an ``error`` message with the code ``previous_response_not_found``
(the client then sends its whole input again, without the id). ``generate: false``
prepares a turn without running the model: its response has no output, and the next
turn can continue from it. Errors are ``{"type": "error", "status", "error": {type,
code, message, param}}`` messages, after which the socket stays open; ``response.processed``
acknowledgements need no answer. A turn's ``stream_id`` is said again on each of its
events. The key comes from the upgrade request's headers.
"""

from __future__ import annotations

import json
import time
from typing import Any

import structlog
from litestar.types import Receive, Scope, Send
from litestar.types.asgi_types import WebSocketAcceptEvent, WebSocketCloseEvent, WebSocketSendEvent

from gateway.admission.keys import KeyInfo
from gateway.errors import GatewayError, InvalidRequestError, NotFoundError
from gateway.http.asgi import EventStream
from gateway.http.endpoint import Endpoint
from gateway.http.intake import Arrival, Services, credentials, session_header, taking_work
from gateway.http.serving import admit, answer
from gateway.ingress.responses import ResponsesCall
from gateway.protocol import ChatCompletion
from gateway.protocol.chat import AssistantMessage, Choice
from gateway.telemetry.propagation import new_request_id

log = structlog.get_logger("shunter.api")
_ENVELOPE = ("type", "stream_id")  # the message's, not the response's
_POLICY_VIOLATION = 1008  # closes the handshake with 403: the key was refused


Responses = Endpoint[ResponsesCall, ChatCompletion]


async def serve_socket(scope: Scope, receive: Receive, send: Send, endpoint: Responses) -> None:
    """One WebSocket connection of the Responses API (``endpoint``'s), until the client
    closes it."""
    services: Services = scope["app"].state.services
    await receive()  # websocket.connect
    try:
        key = await services.admission.authenticate(credentials(scope))
    except GatewayError as exc:
        log.info("websocket_refused", reason=exc.message)
        await send(WebSocketCloseEvent(type="websocket.close", code=_POLICY_VIOLATION, reason=None))
        return
    await send(WebSocketAcceptEvent(type="websocket.accept", subprotocol=None, headers=[]))
    socket = _Socket(scope, services, key, send, endpoint)
    while True:
        message: Any = await receive()
        if message["type"] == "websocket.disconnect":
            return
        text = message.get("text") or (message.get("bytes") or b"").decode(errors="replace")
        await socket.receive(text)


class _Socket:
    """One connection's state: its key and its most recent response's conversation."""

    def __init__(
        self, scope: Scope, services: Services, key: KeyInfo, send: Send, endpoint: Responses
    ) -> None:
        self.endpoint = endpoint
        self.scope = scope
        self.services = services
        self.key = key
        self._send = send
        self._lane = ""  # the turn's stream_id, said again on each of its events
        self._last_id: str | None = None
        self._last_messages: list[dict[str, Any]] = []
        self._last_session: dict[str, str] | None = None
        self.session = session_header(scope)
        self._last_output: list[dict[str, Any]] = []  # its output items (hosted listings)

    async def receive(self, text: str) -> None:
        """Answer one client message; a failure is an ``error`` message."""
        try:
            payload = json.loads(text)
        except ValueError:
            payload = None
        kind = payload.get("type") if isinstance(payload, dict) else None
        lane = payload.get("stream_id") if isinstance(payload, dict) else None
        self._lane = f',"stream_id":{json.dumps(lane)}}}' if isinstance(lane, str) else ""
        if kind == "response.create":
            assert isinstance(payload, dict)
            await self._turn({k: v for k, v in payload.items() if k not in _ENVELOPE})
        elif kind != "response.processed":
            refused = InvalidRequestError(
                "Messages are JSON objects of type 'response.create'.", param="type"
            )
            await self._text(_error_message(refused)[1])

    async def _turn(self, body: dict[str, Any]) -> None:
        """One ``response.create``, recorded as a request is (metrics, one log line)."""
        facts: dict[str, Any] = {"request_id": new_request_id(), "key_id": self.key.id}
        started, status = time.perf_counter(), 200
        try:
            await self._create(body, facts)
        except GatewayError as exc:
            status, message = _error_message(exc)
            await self._text(message)
        finally:
            duration = time.perf_counter() - started
            self.scope["app"].state.telemetry.record(facts, status, duration, "responses")
            log.info(
                "request",
                method="WEBSOCKET",
                path=self.scope["path"],
                status=status,
                duration_ms=round(duration * 1000, 2),
                **facts,
            )

    async def _create(self, body: dict[str, Any], facts: dict[str, Any]) -> None:
        generate = body.pop("generate", True)
        facts["model"] = str(body.get("model"))[:256]  # a client's name, bounded in the log
        call = self.endpoint.parse(json.dumps({**body, "stream": True}).encode())
        previous = call.body.previous_response_id
        if previous is not None and previous == self._last_id:
            call.history, call.resumed = self._last_messages, True
            call.session = self._last_session
            call.earlier = self._last_output
        if generate is False:
            await self._prepare_only(call)
        else:
            await self._run(call, facts)
        if call.transcript is not None:
            self._last_id, self._last_messages = call.response_id, call.transcript
            self._last_session = call.session
            self._last_output = call.produced

    async def _run(self, call: ResponsesCall, facts: dict[str, Any]) -> None:
        gateway = taking_work(self.scope["app"].state.gateway)
        arrival = Arrival(
            self.services, gateway, self.key, b"", facts, facts["request_id"], self.session
        )
        admitted, serve = await admit(arrival, self.endpoint, call)
        stream = await answer(admitted, serve)
        assert isinstance(stream, EventStream), "a streamed call is answered with events"
        try:
            async for chunk in stream.frames:
                for data in _payloads(chunk):
                    await self._text(data)
        finally:  # closing the frames closes the upstream stream and settles the bill
            close = getattr(stream.frames, "aclose", None)
            if close is not None:
                await close()

    async def _prepare_only(self, call: ResponsesCall) -> None:
        """``generate: false``: the response is created and completed with no output."""
        await self.endpoint.prepare(self.services, self.key, call)
        nothing = AssistantMessage(content=None)
        empty = ChatCompletion(model=call.model, choices=[Choice(message=nothing)])
        done = json.loads(await self.endpoint.render(call, empty))  # stored, as any response
        running = {**done, "status": "in_progress", "completed_at": None, "usage": None}
        lifecycle = [
            ("response.created", running),
            ("response.in_progress", running),
            ("response.completed", done),
        ]
        for sequence, (kind, response) in enumerate(lifecycle):
            event = {"type": kind, "response": response, "sequence_number": sequence}
            await self._text(json.dumps(event))

    async def _text(self, data: str) -> None:
        if self._lane:
            data = data[:-1] + self._lane
        await self._send(WebSocketSendEvent(type="websocket.send", bytes=None, text=data))


def _payloads(chunk: bytes) -> list[str]:
    """The JSON of each server-sent event in ``chunk`` (its ``data:`` lines)."""
    return [
        line[6:].decode()
        for line in chunk.split(b"\n")
        if line.startswith(b"data: ") and line != b"data: [DONE]"
    ]


def _error_message(exc: GatewayError) -> tuple[int, str]:
    """The status of a failed turn, and its ``error`` message."""
    status, code = exc.status_code, exc.code
    if isinstance(exc, NotFoundError) and exc.param == "previous_response_id":
        status, code = 400, "previous_response_not_found"
    error = {"type": exc.error_type, "code": code, "message": exc.message, "param": exc.param}
    if status == 400:
        error["type"] = "invalid_request_error"
    return status, json.dumps({"type": "error", "status": status, "error": error})
