"""One API request as telemetry sees it: its trace context, the deployments it tried, the
route decision, and (when spans are recorded) its server span and a client span per
attempt, in the OpenTelemetry GenAI conventions.

The request path reaches the request's :class:`RequestTrace` through a context variable
(as OpenTelemetry reaches its current span): dispatch calls :func:`attempt_span` around
each attempt and :func:`note_decision` / :func:`note_tried` when it decides, without
knowing whether anything is recorded. With no exporter, a trace is a handful of fields and
the upstream headers are the client's own (:mod:`gateway.telemetry.propagation`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

from backends.http.upstream import REQUEST_CONTEXT
from gateway.errors import GatewayError
from gateway.telemetry.genai import AnswerBytes, request_attributes
from gateway.telemetry.propagation import Incoming, traceparent

if TYPE_CHECKING:
    from pydantic import BaseModel

    from backends.registry import DeploymentConfig
    from policies import Decision

_CURRENT: ContextVar[RequestTrace | None] = ContextVar("shunter_request_trace", default=None)
_NOTHING = contextlib.nullcontext()
FIRST_TOKEN_EVENT = "gen_ai.first_token"


class RequestTrace:
    """What telemetry gathers about one API request while it is served."""

    __slots__ = (
        "_request_attributes",
        "_token",
        "answer",
        "answered",
        "decision",
        "facts",
        "incoming",
        "operation",
        "parent",
        "request_id",
        "span",
        "tracer",
        "tried",
    )

    def __init__(
        self,
        operation: str,
        facts: dict[str, Any],
        request_id: str,
        incoming: Incoming,
        tracer: trace.Tracer | None = None,
    ) -> None:
        self.operation, self.facts, self.request_id = operation, facts, request_id
        self.incoming, self.tracer = incoming, tracer
        self.tried: str | None = None  # the last deployment an attempt went to
        self.decision: Decision | None = None
        self.span: trace.Span | None = None
        self.parent: Context | None = None
        self.answered: list[_Answered] = []
        self.answer = AnswerBytes()
        self._request_attributes: dict[str, Any] = {}
        self._token: Token[RequestTrace | None] | None = None

    def __enter__(self) -> RequestTrace:
        self._token = _CURRENT.set(self)
        return self

    def __exit__(self, *_: object) -> None:
        if self._token is not None:
            _CURRENT.reset(self._token)

    def request_attributes(self) -> dict[str, Any]:
        """The request's ``gen_ai.request.*`` parameters (see :func:`note_request`)."""
        return self._request_attributes

    def upstream_headers(self, span: trace.Span) -> dict[str, str]:
        """What an upstream gets under ``span``: it is the upstream's parent."""
        context = span.get_span_context()
        headers = {
            "x-request-id": self.request_id,
            "traceparent": traceparent(context.trace_id, context.span_id, context.trace_flags),
        }
        incoming = self.incoming
        if incoming.tracestate is not None:
            headers["tracestate"] = incoming.tracestate
        if incoming.baggage is not None:
            headers["baggage"] = incoming.baggage
        return headers


class _Answered:
    """A client span whose attempt answered: it ends with the request (a stream's runs to
    its last frame; a whole answer's at ``ended_ns``), when usage is known."""

    __slots__ = ("deployment", "ended_ns", "span")

    def __init__(self, deployment: str, span: trace.Span, ended_ns: int) -> None:
        self.deployment, self.span, self.ended_ns = deployment, span, ended_ns


def current() -> RequestTrace | None:
    """The trace of the request being served here, if any."""
    return _CURRENT.get()


def remote_parent(incoming: Incoming) -> Context | None:
    """The client's span as the parent context of the server span, if it sent one."""
    if incoming.traceparent is None:
        return None
    state = TraceState.from_header([incoming.tracestate]) if incoming.tracestate else None
    parent = SpanContext(
        int(incoming.traceparent[3:35], 16),
        int(incoming.traceparent[36:52], 16),
        is_remote=True,
        trace_flags=TraceFlags(int(incoming.traceparent[53:55], 16)),
        trace_state=state,
    )
    return trace.set_span_in_context(NonRecordingSpan(parent))


def note_request(request: BaseModel) -> None:
    """The parsed request's sampling parameters, kept for the spans of a request whose
    spans are recorded (nothing is done for the others)."""
    traced = _CURRENT.get()
    if traced is not None and traced.span is not None:
        fields = {**vars(request), **(request.model_extra or {})}
        traced._request_attributes = request_attributes(fields)


def note_decision(decision: Decision) -> None:
    """Dispatch ranked the candidates: keep the decision for the route attributes."""
    traced = _CURRENT.get()
    if traced is not None:
        traced.decision = decision


def note_tried(deployment: str) -> None:
    """A request went to ``deployment`` without an attempt (its own limit refused it)."""
    traced = _CURRENT.get()
    if traced is not None:
        traced.tried = deployment


def attempt_span(
    operation: str, deployment: DeploymentConfig, retry: int
) -> contextlib.AbstractContextManager[object]:
    """Wraps one attempt: notes the deployment tried and, when spans are recorded, opens
    its client span, whose context the upstream request carries."""
    traced = _CURRENT.get()
    if traced is None:
        return _NOTHING
    traced.tried = deployment.name
    if traced.span is None or traced.tracer is None:
        return _NOTHING
    return _ClientSpan(traced, operation, deployment, retry)


class _ClientSpan:
    """The client span of one attempt (a retry or a fallback gets its own)."""

    __slots__ = ("deployment", "operation", "retry", "span", "started", "token", "traced")

    def __init__(
        self, traced: RequestTrace, operation: str, deployment: DeploymentConfig, retry: int
    ) -> None:
        self.traced, self.operation, self.deployment, self.retry = (
            traced,
            operation,
            deployment,
            retry,
        )

    def __enter__(self) -> trace.Span:
        traced, deployment = self.traced, self.deployment
        assert traced.tracer is not None
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": self.operation,
            "gen_ai.provider.name": deployment.backend,
            "gen_ai.request.model": deployment.model,
            # the GenAI conventions name no streaming flag: ours is namespaced
            "shunter.request.stream": bool(traced.facts.get("stream")),
            "shunter.deployment": deployment.name,
            "shunter.attempt": self.retry,
            "shunter.request_id": traced.request_id,
            **traced.request_attributes(),
            **_server(deployment),
        }
        self.started = time.perf_counter()
        self.span = traced.tracer.start_span(
            f"{self.operation} {deployment.model}",
            context=traced.parent,
            kind=trace.SpanKind.CLIENT,
            attributes=attributes,
        )
        self.token = REQUEST_CONTEXT.set(traced.upstream_headers(self.span))
        return self.span

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, _: Any) -> None:
        REQUEST_CONTEXT.reset(self.token)
        span = self.span
        if exc is None:
            if self.traced.facts.get("stream"):
                waited = time.perf_counter() - self.started
                span.set_attribute("gen_ai.response.time_to_first_chunk", waited)
                span.add_event(FIRST_TOKEN_EVENT, {"gen_ai.response.time_to_first_chunk": waited})
            self.traced.answered.append(_Answered(self.deployment.name, span, time.time_ns()))
            return
        span.set_attribute("error.type", error_type(exc))
        if isinstance(exc, GatewayError) and exc.upstream_status is not None:
            span.set_attribute("http.response.status_code", exc.upstream_status)
        span.set_status(trace.StatusCode.ERROR, getattr(exc, "message", None) or str(exc))
        span.end()


def finish_client_spans(traced: RequestTrace, usage: Mapping[str, Any], stream: bool) -> None:
    """End the answered attempts' spans with what the answer said; the deployment that
    answered gets the usage."""
    answer = traced.answer.attributes()
    # the client saw the public model name; what the upstream named it stays unknown here
    answer.pop("gen_ai.response.model", None)
    answered_by = traced.facts.get("deployment")
    now = time.time_ns()
    for each in traced.answered:
        each.span.set_attributes(answer)
        if each.deployment == answered_by:
            each.span.set_attributes(usage)
        each.span.end(end_time=now if stream else each.ended_ns)


def error_type(exc: BaseException) -> str:
    """A low-cardinality ``error.type``: the error's class, ``cancelled`` for an attempt
    given up (a hedge that lost, a client that left)."""
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled"
    return type(exc).__name__


def deciding_step(decision: Decision | None, answered: str | None) -> str:
    """Which policy step chose the deployment that answered, as a bounded label:
    the first ranker whose score set the winner apart from the runner-up; with one
    candidate left, the filter that dropped the others (else ``only``); ``order`` when
    every score tied and the config order chose (the ``first`` step); ``fallback`` when a
    later candidate answered (failover or a hedge moved on)."""
    if decision is None or not decision.ranked:
        return "none"
    chosen = decision.ranked[0]
    if answered is not None and chosen.name != answered:
        return "fallback"
    if len(decision.ranked) == 1:
        for dropped in decision.dropped:
            for note in dropped.notes:
                if note.verdict == "drop":
                    return note.step
        return "only"
    runner_up = {n.step: n.score for n in decision.ranked[1].notes if n.verdict == "score"}
    for note in chosen.notes:
        if note.verdict == "score" and runner_up.get(note.step, note.score) != note.score:
            return note.step
    return "order"


def _server(deployment: DeploymentConfig) -> dict[str, Any]:
    """``server.address`` / ``server.port`` of a remote deployment's API."""
    base_url = getattr(deployment, "base_url", None)
    if not isinstance(base_url, str):
        return {}
    parts = urlsplit(base_url)
    if not parts.hostname:
        return {}
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return {"server.address": parts.hostname, "server.port": port}
