"""Responses over a WebSocket: ``GET /v1/responses`` upgraded, as OpenAI's WebSocket mode.

The client sends ``response.create`` messages (the body of ``POST /v1/responses``;
``stream`` is implied); each runs on the same request path as a streamed POST (the edge,
the key's limits, routing, fallback, billing: :mod:`gateway.http.socket`), and its events
come back one JSON text message each, in the same order. One response runs at a time; a
message sent meanwhile waits.

Continuation: the socket keeps the conversation of its most recent response, so a
``previous_response_id`` naming it continues without the store, also under
``store: false``; any other id is read from the stored responses as over HTTP, and one
that is in neither is an ``error`` message with the code ``previous_response_not_found``
(the client then sends its whole input again, without the id). ``generate: false``
prepares a turn without running the model: its response has no output, and the next
turn can continue from it; its input may be empty (Codex's warm-up, ``input: []``, as
OpenAI answers it: nothing goes upstream). A ``generate`` that is not a boolean is
refused by name. Errors are ``{"type": "error", "status", "error": {type,
code, message, param}}`` messages, after which the socket stays open;
``response.processed`` acknowledgements need no answer. A turn's ``stream_id`` is said
again on each of its events.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import orjson

from gateway.apis.contract import Decoded, Exchange, Outcome, Reply
from gateway.apis.responses.codec import decoded_of, encode, prepare, read, render
from gateway.apis.responses.translation import ResponsesCall
from gateway.errors import GatewayError, InvalidRequestError, NotFoundError
from gateway.protocol import ChatCompletion
from gateway.protocol.chat import AssistantMessage, Choice

_ENVELOPE = ("type", "stream_id", "generate")  # the message's, not the response's


class ResponsesSocket:
    """One connection's state: its most recent response's conversation, and the turn's
    ``stream_id``."""

    def __init__(self, opened: Exchange) -> None:
        self._lane = b""
        self._last_id: str | None = None
        self._last_messages: list[dict[str, Any]] = []
        self._last_session: dict[str, str] | None = None
        self._last_output: list[dict[str, Any]] = []  # its output items (hosted listings)

    async def message(self, exchange: Exchange) -> Decoded | Reply:
        """A ``response.create`` to run (or, with ``generate: false``, its prepared
        response); nothing for an acknowledgement."""
        payload = _payload(exchange.body)
        lane = payload.get("stream_id")
        self._lane = b',"stream_id":' + orjson.dumps(lane) if isinstance(lane, str) else b""
        kind = payload.get("type")
        if kind == "response.processed":
            return Reply()
        if kind != "response.create":
            raise InvalidRequestError(
                "Messages are JSON objects of type 'response.create'.", param="type"
            )
        generate = payload.get("generate", True)
        if not isinstance(generate, bool):
            raise InvalidRequestError("generate must be true or false.", param="generate")
        body = {k: v for k, v in payload.items() if k not in _ENVELOPE}
        exchange.facts["model"] = str(body.get("model"))[:256]
        call = read(orjson.dumps({**body, "stream": True}))
        call.generate = generate  # a warm-up (no input) runs nothing and is answered
        previous = call.body.previous_response_id
        if previous is not None and previous == self._last_id:
            call.history, call.resumed = self._last_messages, True
            call.session = self._last_session
            call.earlier = self._last_output
        await prepare(exchange, call)
        if not generate:
            return self._lane_reply(await self._prepared_only(call))
        return decoded_of(call)

    async def encode(self, decoded: Decoded, outcome: Outcome) -> Reply:
        reply = await encode(decoded.call, True, outcome)
        if reply.frames is not None:
            reply.frames = self._remembering(decoded.call, reply.frames)
        return reply

    def error(self, exc: GatewayError) -> Reply:
        """A refused turn as an ``error`` message; the socket stays open."""
        status, code = exc.status_code, exc.code
        if isinstance(exc, NotFoundError) and exc.param == "previous_response_id":
            status, code = 400, "previous_response_not_found"
        error = {"type": exc.error_type, "code": code, "message": exc.message, "param": exc.param}
        if status == 400:
            error["type"] = "invalid_request_error"
        said = orjson.dumps({"type": "error", "status": status, "error": error})
        return Reply(self._laned(said), status=status)

    async def _prepared_only(self, call: ResponsesCall) -> list[bytes]:
        """``generate: false``: the response is created and completed with no output."""
        nothing = AssistantMessage(content=None)
        empty = ChatCompletion(model=call.model, choices=[Choice(message=nothing)])
        done = json.loads(await render(call, empty))  # stored, as any response
        self._remember(call)
        running = {**done, "status": "in_progress", "completed_at": None, "usage": None}
        lifecycle = [
            ("response.created", running),
            ("response.in_progress", running),
            ("response.completed", done),
        ]
        return [
            orjson.dumps({"type": kind, "response": response, "sequence_number": sequence})
            for sequence, (kind, response) in enumerate(lifecycle)
        ]

    def _lane_reply(self, messages: list[bytes]) -> Reply:
        async def frames() -> AsyncIterator[bytes]:
            for message in messages:
                yield b"data: " + self._laned(message) + b"\n\n"

        return Reply(frames=frames())

    async def _remembering(
        self, call: ResponsesCall, frames: AsyncIterator[bytes]
    ) -> AsyncIterator[bytes]:
        """``frames`` with the turn's ``stream_id``; once written, the conversation is
        remembered for the next turn."""
        try:
            async for chunk in frames:
                yield self._laned_frames(chunk) if self._lane else chunk
        finally:
            close = getattr(frames, "aclose", None)
            if close is not None:
                await close()
        self._remember(call)

    def _remember(self, call: ResponsesCall) -> None:
        if call.transcript is not None:
            self._last_id, self._last_messages = call.response_id, call.transcript
            self._last_session = call.session
            self._last_output = call.produced

    def _laned(self, data: bytes) -> bytes:
        return data[:-1] + self._lane + b"}" if self._lane else data

    def _laned_frames(self, chunk: bytes) -> bytes:
        lines = chunk.split(b"\n")
        for i, line in enumerate(lines):
            if line.startswith(b"data: {") and line.endswith(b"}"):
                lines[i] = self._laned(line)
        return b"\n".join(lines)


def _payload(text: bytes) -> dict[str, Any]:
    """A message as a JSON object (a 400 for anything else, a nesting bomb included)."""
    try:
        payload = orjson.loads(text)
    except orjson.JSONDecodeError:
        payload = None
    if not isinstance(payload, dict):
        raise InvalidRequestError(
            "Messages are JSON objects of type 'response.create'.", param="type"
        )
    return payload
