"""Request context: a request id on every response and one log line per request, and the
guard on the operations endpoints.

Fields of the log line that a client chose (the model name, ...) are cut to
:data:`MAX_LOG_FIELD` characters. A request whose client left before the answer is logged
with status 499 and ``client_gone`` (``disconnected`` or ``send_timeout``).

With ``http.protect_ops``, ``/metrics`` answers 401 without the master key, and
``/health/readiness`` answers only its status (same HTTP status, ``{"status": ...}``), so
load balancers and probes keep working while its figures need the master key.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from typing import Any

import structlog
from litestar.datastructures import MutableScopeHeaders
from litestar.enums import ScopeType
from litestar.types import ASGIApp, Message, Receive, Scope, Send
from opentelemetry import trace

from gateway.errors import AuthenticationError
from gateway.telemetry.instruments import Telemetry

log = structlog.get_logger("shunter.access")
_VALID_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
MAX_LOG_FIELD = 256
CLIENT_GONE = 499  # nginx's "client closed request": nobody was left to answer


def request_id_of(scope: Scope) -> str:
    """The request's id: the client's ``x-request-id`` if sane, else a new one; stable per scope."""
    state = scope.setdefault("state", {})
    request_id: str | None = state.get("request_id")
    if request_id is None:
        request_id = _incoming_id(scope) or f"req_{os.urandom(16).hex()}"
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

    def __init__(self, app: ASGIApp, telemetry: Telemetry) -> None:
        self.app = app
        self.telemetry = telemetry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:
            await self.app(scope, receive, send)
            return
        operation = _OPERATIONS.get(scope["path"])
        if operation is None:  # health, metrics, models: no span, no access line
            request_id_of(scope)
            scope["state"]["log"] = {}
            await _guarded(self.app, scope, receive, send)
            return
        request_id = request_id_of(scope)
        facts: dict[str, Any] = {}
        scope["state"]["log"] = facts
        status = 0
        started = time.perf_counter()

        async def send_recording_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        telemetry = self.telemetry
        span_cm = (
            telemetry.tracer.start_as_current_span(operation, kind=trace.SpanKind.SERVER)
            if telemetry.tracing
            else contextlib.nullcontext(trace.INVALID_SPAN)
        )
        with span_cm as span:
            bound = structlog.contextvars.bind_contextvars(**_ids(request_id, span))
            try:
                await self.app(scope, receive, send_recording_status)
            finally:
                if not status:  # nothing was sent
                    status = CLIENT_GONE if "client_gone" in facts else 500
                duration = time.perf_counter() - started
                telemetry.record(facts, status, duration)
                if telemetry.tracing:
                    _annotate(span, operation, facts, status, request_id)
                log.info(
                    "request",
                    method=_clip(scope["method"]),
                    path=scope["path"],
                    status=status,
                    duration_ms=round(duration * 1000, 2),
                    **_clipped(facts),
                )
                structlog.contextvars.reset_contextvars(**bound)


def _clip(value: str) -> str:
    if len(value) <= MAX_LOG_FIELD:
        return value
    return f"{value[:MAX_LOG_FIELD]}...(+{len(value) - MAX_LOG_FIELD} chars)"


def _clipped(facts: dict[str, Any]) -> dict[str, Any]:
    """``facts`` with every string cut to :data:`MAX_LOG_FIELD` (the dict itself when none
    is longer: the usual case costs no copy)."""
    for value in facts.values():
        if isinstance(value, str) and len(value) > MAX_LOG_FIELD:
            return {k: _clip(v) if isinstance(v, str) else v for k, v in facts.items()}
    return facts


# --- the operations endpoints -----------------------------------------------------------

_PROTECTED = {"/metrics": "deny", "/health/readiness": "status only"}


async def _guarded(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    """Serve a request outside the API, guarding the operations endpoints when asked to."""
    rule = _PROTECTED.get(scope["path"])
    services = getattr(scope["app"].state, "services", None)
    if rule is None or services is None or not services.protect_ops:
        await app(scope, receive, send)
        return
    keys = services.admission.keys
    if keys.is_master(_header(scope, b"authorization")):
        await app(scope, receive, send)
    elif rule == "deny":
        error = AuthenticationError("This endpoint needs the gateway's master key.")
        await _send_json(send, error.status_code, error.to_body())
    else:
        await _status_only(app, scope, receive, send)


async def _status_only(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    """Run the endpoint, but send only the ``status`` of its JSON answer (same HTTP status)."""
    head: dict[str, Any] = {"status": 500}
    parts: list[bytes] = []

    async def capture(message: Message) -> None:
        if message["type"] == "http.response.start":
            head["status"] = message["status"]
        elif message["type"] == "http.response.body":
            parts.append(message.get("body", b""))

    await app(scope, receive, capture)
    try:
        answer = json.loads(b"".join(parts))
    except ValueError:
        answer = {}
    status = answer.get("status") if isinstance(answer, dict) else None
    await _send_json(send, head["status"], {"status": status})


async def _send_json(send: Send, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(data))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data, "more_body": False})


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


def _ids(request_id: str, span: trace.Span) -> dict[str, str]:
    context = span.get_span_context()
    if not context.is_valid:  # traces are off: no id to correlate with
        return {"request_id": request_id}
    return {"request_id": request_id, "trace_id": f"{context.trace_id:032x}"}


_OPERATIONS = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "text_completion",
    "/v1/responses": "responses",
    "/v1/messages": "messages",
    "/v1/embeddings": "embeddings",
}


def _annotate(
    span: trace.Span, operation: str, facts: dict[str, Any], status: int, request_id: str
) -> None:
    """GenAI semantic-convention attributes on the request's server span."""
    model = facts.get("model")
    if model:
        span.update_name(f"{operation} {model}")
    attributes = {
        "gen_ai.operation.name": operation,
        "gen_ai.request.model": model,
        "gen_ai.request.stream": facts.get("stream"),
        "gen_ai.usage.input_tokens": facts.get("prompt_tokens"),
        "gen_ai.usage.output_tokens": facts.get("completion_tokens"),
        "http.response.status_code": status,
        "shunter.request_id": request_id,
        "shunter.route.deployment": facts.get("deployment"),
        "shunter.route.reason": facts.get("route"),
    }
    span.set_attributes({k: v for k, v in attributes.items() if v is not None})
    if status >= 400:
        span.set_attribute("error.type", str(status))
        span.set_status(trace.StatusCode.ERROR)


def _incoming_id(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"x-request-id":
            text = value.decode("latin-1")
            return text if _VALID_ID.match(text) else None
    return None
