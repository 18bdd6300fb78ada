"""Every tool call accounted: a client span (OpenTelemetry's MCP and GenAI names), the
Prometheus series (calls by outcome, latency, bytes, per server and tool), and the ring of
recent calls the status page shows.

One :class:`ToolAccounting` per app, shared by every hub the app has over its life (a
reloaded config gets a new hub, not new metrics). Label values are bounded: ``server`` is a
configured server, ``tool`` a tool that server listed (else ``unknown``), ``outcome`` one of
:data:`OUTCOMES`.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from opentelemetry import trace
from prometheus_client import CollectorRegistry, Counter, Histogram

from gateway.errors import GatewayError
from gateway.telemetry.tracing import current, error_type

OUTCOMES = ("ok", "tool_error", "not_allowed", "not_found", "timeout", "server_error")
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
RECENT_CALLS = 200
UNKNOWN_TOOL = "unknown"


class ToolCall(NamedTuple):
    """One finished call, as the status page lists it."""

    at: float
    request_id: str
    key_id: str
    server: str
    tool: str
    outcome: str
    duration_ms: float
    bytes_in: int
    bytes_out: int
    error: str | None


@dataclass
class CallRecord:
    """What a call's accounting gathers while it runs (the hub fills it in)."""

    server: str
    tool: str
    key_id: str
    request_id: str
    bytes_out: int = 0
    bytes_in: int = 0
    outcome: str = "ok"
    error: str | None = None
    known_tool: bool = False
    started: float = field(default_factory=time.perf_counter)


class ToolAccounting:
    """The app's tool metrics, recent calls and tracer (read at each call: tracing may be
    switched on after this is made)."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        tracer: Callable[[], trace.Tracer] | None = None,
        recent: int = RECENT_CALLS,
    ) -> None:
        self.registry = registry = registry or CollectorRegistry()
        self._tracer = tracer or trace.NoOpTracer
        labels = ("server", "tool")
        self.calls = Counter(
            "shunter_mcp_tool_calls", "MCP tool calls by outcome", (*labels, "outcome"),
            registry=registry,
        )  # fmt: skip
        self.duration = Histogram(
            "shunter_mcp_tool_call_duration_seconds", "MCP tool call latency", labels,
            buckets=LATENCY_BUCKETS, registry=registry,
        )  # fmt: skip
        self.bytes = Counter(
            "shunter_mcp_tool_bytes", "Bytes of tool arguments (out) and results (in)",
            (*labels, "direction"), registry=registry,
        )  # fmt: skip
        self.listings = Counter(
            "shunter_mcp_list_failures", "Tool listings a server failed", ("server",),
            registry=registry,
        )  # fmt: skip
        self._recent: deque[ToolCall] = deque(maxlen=recent)
        self.total = 0

    @contextmanager
    def call(self, record: CallRecord) -> Iterator[CallRecord]:
        """Account the call run inside: its span, metrics and recent-calls entry."""
        tracer = self._tracer()
        traced = current()
        span = tracer.start_span(
            f"tools/call {record.tool}" if record.known_tool else "tools/call",
            context=traced.parent if traced is not None else None,
            kind=trace.SpanKind.CLIENT,
            attributes={
                "mcp.method.name": "tools/call",
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": record.tool,
                "shunter.mcp.server": record.server,
                "shunter.key_id": record.key_id,
                "shunter.request_id": record.request_id,
            },
        )
        try:
            yield record
        except GatewayError as exc:
            record.outcome, record.error = _outcome(exc), exc.message
            span.set_attribute("error.type", error_type(exc))
            span.set_status(trace.StatusCode.ERROR, exc.message)
            raise
        except Exception as exc:  # a failure of the gateway itself, accounted all the same
            record.outcome, record.error = "server_error", type(exc).__name__
            span.set_attribute("error.type", error_type(exc))
            span.set_status(trace.StatusCode.ERROR)
            raise
        finally:
            self._finish(record, span)

    def _finish(self, record: CallRecord, span: trace.Span) -> None:
        duration = time.perf_counter() - record.started
        if record.outcome == "tool_error":
            span.set_attribute("error.type", "tool_error")
        span.set_attributes(
            {"shunter.mcp.bytes_out": record.bytes_out, "shunter.mcp.bytes_in": record.bytes_in}
        )
        span.end()
        tool = record.tool if record.known_tool else UNKNOWN_TOOL
        self.calls.labels(record.server, tool, record.outcome).inc()
        self.duration.labels(record.server, tool).observe(duration)
        self.bytes.labels(record.server, tool, "out").inc(record.bytes_out)
        self.bytes.labels(record.server, tool, "in").inc(record.bytes_in)
        self.total += 1
        self._recent.append(
            ToolCall(
                time.time(), record.request_id, record.key_id, record.server,
                _clip(record.tool), record.outcome, round(duration * 1000, 2),
                record.bytes_in, record.bytes_out, record.error and _clip(record.error, 200),
            )
        )  # fmt: skip

    def list_failed(self, server: str) -> None:
        """A server that could not list its tools."""
        self.listings.labels(server).inc()

    def last(self, count: int) -> list[dict[str, Any]]:
        """The newest ``count`` calls, newest first, as JSON-ready dicts."""
        items = list(self._recent)[-count:] if count > 0 else []
        return [c._asdict() for c in reversed(items)]


def _outcome(exc: GatewayError) -> str:
    code = exc.code or ""
    if code == "tool_not_allowed":
        return "not_allowed"
    if code == "tool_not_found":
        return "not_found"
    if exc.status_code == 504:
        return "timeout"
    return "server_error"


def _clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
