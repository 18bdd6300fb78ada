"""The server span of one API request, in the OpenTelemetry GenAI conventions.

It continues the client's trace (its ``traceparent`` is the parent) and, when the request
is done, carries the operation, the requested model, the sampling parameters, the answer's
id, model and finish reasons, the usage, and the route decision as ``shunter.route.*``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from litestar.types import Scope
from opentelemetry import trace

from gateway.telemetry.tracing import RequestTrace, deciding_step, remote_parent

MAX_ATTRIBUTE = 256  # client-chosen text on a span is cut to this many characters


def start_server_span(traced: RequestTrace, scope: Scope) -> trace.Span:
    """Open the request's server span under the client's context; attempts hang off it."""
    assert traced.tracer is not None
    parent = remote_parent(traced.incoming)
    span = traced.tracer.start_span(
        traced.operation,
        context=parent,
        kind=trace.SpanKind.SERVER,
        attributes={
            "http.request.method": str(scope.get("method", "")),
            "url.path": scope["path"],
            "gen_ai.operation.name": traced.operation,
            "shunter.request_id": traced.request_id,
        },
    )
    traced.span = span
    traced.parent = trace.set_span_in_context(span, parent)
    return span


def annotate_server_span(
    span: trace.Span,
    traced: RequestTrace,
    status: int,
    usage: Mapping[str, Any],
    models: frozenset[str],
) -> None:
    """The finished request's attributes; its name gains the model when the config
    serves that name (span names stay few)."""
    facts = traced.facts
    model = facts.get("model")
    if isinstance(model, str) and model in models:
        span.update_name(f"{traced.operation} {model}")
    attributes: dict[str, Any] = {
        "gen_ai.request.model": _clip(model) if isinstance(model, str) else None,
        "shunter.request.stream": facts.get("stream"),
        "http.response.status_code": status,
        "shunter.route.deployment": facts.get("deployment") or traced.tried,
        "shunter.route.reason": facts.get("route"),
        "shunter.cost_usd": facts.get("cost_usd"),
        "shunter.cache": facts.get("cache"),
        "shunter.key_id": facts.get("key_id"),
    }
    if facts.get("ttft_ms") is not None:
        attributes["gen_ai.response.time_to_first_chunk"] = facts["ttft_ms"] / 1000
    decision = traced.decision
    if decision is not None:
        attributes["shunter.route.step"] = deciding_step(decision, facts.get("deployment"))
        attributes["shunter.route.candidates"] = decision.names
        attributes["shunter.route.dropped"] = [r.name for r in decision.dropped]
    attributes.update(traced.request_attributes())
    if status < 400:
        attributes.update(traced.answer.attributes())
    span.set_attributes({k: v for k, v in attributes.items() if v is not None})
    span.set_attributes(usage)
    if status >= 400:
        span.set_attribute("error.type", str(status))
        span.set_status(trace.StatusCode.ERROR)


def _clip(text: str) -> str:
    return text if len(text) <= MAX_ATTRIBUTE else text[:MAX_ATTRIBUTE] + "..."
