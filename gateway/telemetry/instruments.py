"""Metrics (Prometheus, per app) and traces (OpenTelemetry, GenAI semantic conventions).

Nothing here is global: each app owns a :class:`Telemetry` with its own Prometheus registry
and tracer provider. Traces are exported only when the standard ``OTEL_*`` variables ask
for it (``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, or
``OTEL_TRACES_EXPORTER=console``); ``OTEL_SDK_DISABLED=true`` turns them off.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.trace import NoOpTracer, Tracer
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from backends.base import Backend

TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1,
    2.5,
    5,
    7.5,
    10,
)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5)
DURATION_BUCKETS = tuple(0.01 * 2**i for i in range(14))  # 0.01 … 81.92 s
TOKEN_BUCKETS = tuple(4**i for i in range(14))  # 1 … 67108864


class Telemetry:
    """The app's metrics registry and tracer."""

    def __init__(self, span_exporter: SpanExporter | None = None) -> None:
        self.registry = CollectorRegistry()
        labels = ("model", "deployment")
        self.requests = Counter(
            "shunter_requests",
            "API requests by outcome",
            (*labels, "status"),
            registry=self.registry,
        )
        self.ttft = Histogram(
            "gen_ai_server_time_to_first_token_seconds",
            "Time to first streamed token",
            labels,
            buckets=TTFT_BUCKETS,
            registry=self.registry,
        )
        self.tpot = Histogram(
            "gen_ai_server_time_per_output_token_seconds",
            "Time per output token after the first",
            labels,
            buckets=TPOT_BUCKETS,
            registry=self.registry,
        )
        self.duration = Histogram(
            "gen_ai_server_request_duration_seconds",
            "End-to-end request duration",
            labels,
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.tokens = Histogram(
            "gen_ai_client_token_usage",
            "Tokens per request",
            (*labels, "gen_ai_token_type"),
            buckets=TOKEN_BUCKETS,
            registry=self.registry,
        )
        self.cost = Counter(
            "shunter_cost_usd", "Spend from deployment prices", labels, registry=self.registry
        )
        self.tracer_provider, exporting = _tracer_provider(span_exporter)
        # with nowhere to export, recording spans is pure cost on the request path
        self._series: dict[tuple[str, str], _Series] = {}
        self.tracer: Tracer = (
            self.tracer_provider.get_tracer("shunter") if exporting else NoOpTracer()
        )

    @property
    def tracing(self) -> bool:
        """Whether spans are recorded (some exporter is configured)."""
        return tracing(self.tracer)

    def watch(
        self,
        backends: Callable[[], Mapping[str, Backend]],
        breakers: Callable[[], Mapping[str, Any]],
    ) -> None:
        """Expose live backend figures (queue, slots, KV) and each deployment's breaker at
        scrape time: its state, the fallbacks away from it by cause and its probes by result
        (``breakers``: the dispatcher's circuit breakers, which keep those tallies)."""
        self.registry.register(_LiveCollector(backends, breakers))

    def record(self, facts: Mapping[str, Any], status: int, duration_s: float) -> None:
        """Record one finished API request from the facts its handler gathered."""
        model = str(facts.get("model", "-"))
        deployment = str(facts.get("deployment", "-"))
        self.requests.labels(model, deployment, str(status)).inc()
        if "deployment" not in facts:
            return
        series = self._series.get((model, deployment))
        if series is None:
            series = self._series[model, deployment] = _Series(self, model, deployment)
        series.duration.observe(duration_s)
        prompt, completion = facts.get("prompt_tokens"), facts.get("completion_tokens")
        if prompt is not None:
            series.input_tokens.observe(prompt)
        if completion is not None:
            series.output_tokens.observe(completion)
        if facts.get("cost_usd"):
            series.cost.inc(facts["cost_usd"])
        ttft_ms = facts.get("ttft_ms")
        if ttft_ms is not None:
            ttft_s = ttft_ms / 1000
            series.ttft.observe(ttft_s)
            if completion and completion > 1:
                series.tpot.observe(max(0.0, duration_s - ttft_s) / (completion - 1))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()


class _LiveCollector(Collector):
    def __init__(
        self,
        backends: Callable[[], Mapping[str, Backend]],
        breakers: Callable[[], Mapping[str, Any]],
    ) -> None:
        self._backends = backends
        self._breakers = breakers

    def collect(self) -> Iterable[Metric]:
        queue = GaugeMetricFamily("shunter_queue_depth", "Requests waiting", labels=["deployment"])
        in_flight = GaugeMetricFamily(
            "shunter_in_flight", "Requests running or waiting", labels=["deployment"]
        )
        slots = GaugeMetricFamily(
            "shunter_slots_busy", "Busy sequence slots", labels=["deployment"]
        )
        kv = GaugeMetricFamily(
            "shunter_kv_cache_usage_ratio", "KV cache cells in use (0-1)", labels=["deployment"]
        )
        open_ = GaugeMetricFamily(
            "shunter_deployment_cooled_down",
            "1 while the breaker is open",
            labels=["deployment"],
        )
        loaded = GaugeMetricFamily(
            "shunter_model_loaded",
            "1 while a local model loaded on demand is in memory",
            labels=["deployment"],
        )
        breakers = self._breakers()
        yield from _breaker_families(breakers)
        for name, backend in self._backends().items():
            stats = backend.stats()
            queue.add_metric([name], stats.queue_depth)
            in_flight.add_metric([name], stats.in_flight)
            if stats.slots_busy is not None:
                slots.add_metric([name], stats.slots_busy)
            if stats.kv_used is not None and stats.kv_total:
                kv.add_metric([name], stats.kv_used / stats.kv_total)
            if stats.loaded is not None:
                loaded.add_metric([name], 1.0 if stats.loaded else 0.0)
            breaker = breakers.get(name)
            if breaker is not None:
                open_.add_metric([name], 1.0 if breaker.state == "open" else 0.0)
        yield from (queue, in_flight, slots, kv, open_, loaded)


def _breaker_families(breakers: Mapping[str, Any]) -> Iterable[Metric]:
    """Breaker state (one series per state, 1 for the current one), fallbacks away from each
    deployment by cause, and background probes by result. Label values come from the
    config (deployment names) and fixed sets (states, causes, results) only."""
    state = GaugeMetricFamily(
        "shunter_breaker_state",
        "1 for the breaker's current state (closed, open, half_open)",
        labels=["deployment", "state"],
    )
    fallbacks = CounterMetricFamily(
        "shunter_fallbacks",
        "Requests that left a deployment for the next candidate, by cause",
        labels=["deployment", "cause"],
    )
    probes = CounterMetricFamily(
        "shunter_breaker_probes",
        "Background health probes of open deployments, by result",
        labels=["deployment", "result"],
    )
    for name, breaker in breakers.items():
        current = breaker.state
        for each in ("closed", "open", "half_open"):
            state.add_metric([name, each], 1.0 if each == current else 0.0)
        for cause, count in sorted(breaker.fallbacks.items()):
            fallbacks.add_metric([name, cause], count)
        for result, count in sorted(breaker.probes.items()):
            probes.add_metric([name, result], count)
    return state, fallbacks, probes


def tracing(tracer: Tracer) -> bool:
    """Whether ``tracer`` records spans (not the no-op one used when nothing exports)."""
    return not isinstance(tracer, NoOpTracer)


def _tracer_provider(exporter: SpanExporter | None) -> tuple[TracerProvider, bool]:
    """The provider, and whether it exports anything."""
    disabled = os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true"
    service = os.environ.get("OTEL_SERVICE_NAME", "shunter")
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        return provider, True
    configured = None if disabled else _exporter_from_env()
    if configured is not None:
        provider.add_span_processor(BatchSpanProcessor(configured))
    return provider, configured is not None


def _exporter_from_env() -> SpanExporter | None:
    kind = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").lower()
    if kind == "console":
        return ConsoleSpanExporter()
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if kind != "otlp" or not endpoint:
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()  # reads the OTEL_EXPORTER_OTLP_* variables itself


class _Series:
    """The per-(model, deployment) children of the request metrics, looked up once."""

    def __init__(self, telemetry: Telemetry, model: str, deployment: str) -> None:
        self.duration = telemetry.duration.labels(model, deployment)
        self.input_tokens = telemetry.tokens.labels(model, deployment, "input")
        self.output_tokens = telemetry.tokens.labels(model, deployment, "output")
        self.cost = telemetry.cost.labels(model, deployment)
        self.ttft = telemetry.ttft.labels(model, deployment)
        self.tpot = telemetry.tpot.labels(model, deployment)
