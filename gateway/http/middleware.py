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

import json
import logging
import time
from typing import Any

import structlog
from litestar.enums import ScopeType
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from backends.http.upstream import REQUEST_CONTEXT
from gateway.apis.contract import custom_method
from gateway.errors import AuthenticationError, GatewayError
from gateway.http.asgi import lost
from gateway.telemetry.instruments import Telemetry
from gateway.telemetry.propagation import new_request_id, read_incoming
from gateway.telemetry.spans import annotate_server_span, start_server_span
from gateway.telemetry.tracing import RequestTrace, finish_client_spans

log = structlog.get_logger("shunter.access")
MAX_LOG_FIELD = 256
CLIENT_GONE = 499  # nginx's "client closed request": nobody was left to answer


def request_id_of(scope: Scope) -> str:
    """The request's id: the client's ``x-request-id`` if sane, else a new one; stable per scope."""
    state = scope.setdefault("state", {})
    request_id: str | None = state.get("request_id")
    if request_id is None:
        request_id = read_incoming(scope["headers"]).request_id or new_request_id()
        state["request_id"] = request_id
    return request_id


async def add_request_id(message: Message, scope: Scope) -> None:
    """``before_send`` hook: runs for every response, unknown routes included."""
    if message["type"] == "http.response.start":
        # one id: a response's own gives way to the request's
        headers = [h for h in message.get("headers") or () if h[0].lower() != b"x-request-id"]
        message["headers"] = [*headers, (b"x-request-id", request_id_of(scope).encode())]


class RequestContextMiddleware:
    """Binds the request id (and trace id) to log lines, carries the client's trace
    context on to the upstreams, and logs one line when the body is done.

    Handlers add facts (model, deployment, tokens, TTFT) to ``scope["state"]["log"]``; the
    line is written after the last byte, so a stream's line carries its real duration.
    Keys and prompts are never logged. With spans recorded, the request gets a server span
    continuing the client's trace, and each upstream attempt a client span under it
    (:mod:`gateway.telemetry.tracing`); without, the client's ``traceparent`` reaches the
    upstream as it came, at the cost of reading one more header.
    """

    def __init__(self, app: ASGIApp, telemetry: Telemetry) -> None:
        self.app = app
        self.telemetry = telemetry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:
            await self.app(scope, receive, send)
            return
        operation = operation_of(scope)
        if operation is None:  # health, metrics, the status page: no span, no access line
            request_id_of(scope)
            scope["state"]["log"] = {}
            await _guarded(self.app, scope, receive, send)
            return
        incoming = read_incoming(scope["headers"])
        request_id = incoming.request_id or new_request_id()
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        facts: dict[str, Any] = {}
        state["log"] = facts
        telemetry = self.telemetry
        if telemetry.tracing:
            traced = RequestTrace(operation, facts, request_id, incoming, telemetry.tracer)
            await self._traced(scope, receive, send, traced)
            return
        traced = RequestTrace(operation, facts, request_id, incoming)
        ids = {"request_id": request_id}
        if incoming.traceparent is not None:
            ids["trace_id"] = incoming.traceparent[3:35]
        upstream = REQUEST_CONTEXT.set(incoming.passed_through(request_id))
        status = 0
        started = time.perf_counter()

        async def send_recording_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        bound = structlog.contextvars.bind_contextvars(**ids)
        try:
            with traced:
                await self.app(scope, receive, send_recording_status)
        finally:
            REQUEST_CONTEXT.reset(upstream)
            self._done(scope, traced, status, time.perf_counter() - started)
            structlog.contextvars.reset_contextvars(**bound)

    async def _traced(
        self, scope: Scope, receive: Receive, send: Send, traced: RequestTrace
    ) -> None:
        """Serve one request under its server span; the answer's first and last bytes are
        kept for the span's GenAI attributes."""
        span = start_server_span(traced, scope)
        context = span.get_span_context()
        ids = {"request_id": traced.request_id, "trace_id": f"{context.trace_id:032x}"}
        upstream = REQUEST_CONTEXT.set(traced.upstream_headers(span))
        status = 0
        started = time.perf_counter()

        async def send_keeping_answer(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                traced.answer.add(message.get("body", b""))
            await send(message)

        bound = structlog.contextvars.bind_contextvars(**ids)
        try:
            with traced:
                await self.app(scope, receive, send_keeping_answer)
        finally:
            REQUEST_CONTEXT.reset(upstream)
            duration = time.perf_counter() - started
            status = self._done(scope, traced, status, duration)
            usage = _usage(traced.facts)
            finish_client_spans(traced, usage, bool(traced.facts.get("stream")))
            annotate_server_span(span, traced, status, usage, self.telemetry.models)
            span.end()
            structlog.contextvars.reset_contextvars(**bound)

    def _done(self, scope: Scope, traced: RequestTrace, status: int, duration: float) -> int:
        """Record the finished request and write its line; the status it ended with."""
        facts = traced.facts
        if "client_gone" not in facts and lost(scope):  # gone with no watch to see it
            facts["client_gone"] = "disconnected"
        if "client_gone" in facts:  # whatever was sent, nobody was left to read it all
            status = CLIENT_GONE
        elif not status:  # nothing was sent
            status = 500
        method, path = str(scope.get("method", "")), scope["path"]
        record_request(
            self.telemetry, facts, status, duration, traced.operation, method, path, traced
        )
        return status


def operation_of(scope: Scope) -> str | None:
    """The registry's name of the operation a request is routed to (``None``: not an API
    operation: health, metrics, the status page)."""
    handler = scope.get("route_handler")
    if handler is None:
        return None
    operations = handler.opt.get("operations")
    if operations is None:
        return None
    named: str | dict[str | None, str] | None = operations.get(scope.get("method", ""))
    if not isinstance(named, dict):
        return named
    parameter = handler.opt.get("parameter") or ""
    value = str((scope.get("path_params") or {}).get(parameter, ""))
    action = custom_method(value)[1]
    found = named.get(action) or named.get(None) or next(iter(named.values()))
    return found


def record_request(
    telemetry: Telemetry,
    facts: dict[str, Any],
    status: int,
    duration: float,
    operation: str,
    method: str,
    path: str,
    traced: RequestTrace | None = None,
) -> None:
    """Count a finished request (or WebSocket message) and write its access line: the
    path (never the query string, which may carry a key), the key's id, the request id
    and what the request's layers noted."""
    telemetry.record(facts, status, duration, operation, traced)
    if not log.is_enabled_for(logging.INFO):  # the access log is off: build no line
        return
    log.info(
        "request",
        method=_clip(method),
        path=_clip(path),
        status=status,
        duration_ms=round(duration * 1000, 2),
        **_clipped(facts),
    )


def note_refusal(facts: dict[str, Any] | None, exc: GatewayError) -> None:
    """Put why a request was refused on its access line: the error's ``code`` and the
    field it names (``param``), where they are known."""
    if facts is None or exc.status_code >= 500:
        return
    if exc.code is not None:
        facts.setdefault("error_code", exc.code)
    if exc.param is not None:
        facts.setdefault("error_param", exc.param)


def _usage(facts: dict[str, Any]) -> dict[str, Any]:
    usage = {
        "gen_ai.usage.input_tokens": facts.get("prompt_tokens"),
        "gen_ai.usage.output_tokens": facts.get("completion_tokens"),
    }
    return {k: v for k, v in usage.items() if v is not None}


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
    spine = getattr(scope["app"].state, "spine", None)
    if rule is None or spine is None or not spine.protect_ops:
        await app(scope, receive, send)
        return
    keys = spine.services.admission.keys
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
