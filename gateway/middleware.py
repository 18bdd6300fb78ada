"""Request context: a request id on every response and one log line per request."""

from __future__ import annotations

import re
import time
import uuid
from typing import Any

import structlog
from litestar.datastructures import MutableScopeHeaders
from litestar.enums import ScopeType
from litestar.types import ASGIApp, Message, Receive, Scope, Send

log = structlog.get_logger("switchyard.access")
_VALID_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def request_id_of(scope: Scope) -> str:
    """The request's id: the client's ``x-request-id`` if sane, else a new one; stable per scope."""
    state = scope.setdefault("state", {})
    request_id: str | None = state.get("request_id")
    if request_id is None:
        request_id = _incoming_id(scope) or f"req_{uuid.uuid4().hex}"
        state["request_id"] = request_id
    return request_id


async def add_request_id(message: Message, scope: Scope) -> None:
    """``before_send`` hook: runs for every response, unknown routes included."""
    if message["type"] == "http.response.start":
        MutableScopeHeaders.from_message(message)["x-request-id"] = request_id_of(scope)


class RequestContextMiddleware:
    """Binds the request id to log lines and logs one line when the body is done.

    Handlers add facts (model, deployment, tokens, TTFT) to ``scope["state"]["log"]``; the
    line is written after the last byte, so a stream's line carries its real duration.
    Keys and prompts are never logged.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:
            await self.app(scope, receive, send)
            return
        request_id = request_id_of(scope)
        facts: dict[str, Any] = {}
        scope["state"]["log"] = facts
        status = 500
        started = time.perf_counter()

        async def send_recording_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        with structlog.contextvars.bound_contextvars(request_id=request_id):
            try:
                await self.app(scope, receive, send_recording_status)
            finally:
                log.info(
                    "request",
                    method=scope["method"],
                    path=scope["path"],
                    status=status,
                    duration_ms=round((time.perf_counter() - started) * 1000, 2),
                    **facts,
                )


def _incoming_id(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"x-request-id":
            text = value.decode("latin-1")
            return text if _VALID_ID.match(text) else None
    return None
