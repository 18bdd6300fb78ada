"""Metrics (Prometheus, per app) and traces (OpenTelemetry, GenAI semantic conventions).

Nothing here is global: each app owns a :class:`Telemetry` with its own Prometheus registry
and tracer provider. Traces are exported only when the standard ``OTEL_*`` variables ask
for it (:mod:`gateway.telemetry.exporters`).

Every label value is bounded by construction: ``operation`` is one of the API operations,
``model`` a public model name of the config (any other name a client sends counts as
``unknown``), ``deployment`` a deployment of the config (``-`` when the request reached
none), ``step`` a policy step's name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry.trace import NoOpTracer, Tracer
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from backends.base import Backend
from gateway.telemetry.collectors import LiveCollector
from gateway.telemetry.exporters import tracer_provider
from gateway.telemetry.history import History, engine_figures
from gateway.telemetry.recent import RecentDecisions
from gateway.telemetry.tracing import RequestTrace, deciding_step

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

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
UNKNOWN_MODEL = "unknown"
NO_DEPLOYMENT = "-"
_LABELS = ("operation", "model", "deployment")


_STOP_REASONS = ("budget", "tokens", "loop")


class Telemetry:
    """The app's metrics registry, tracer, recent route decisions and last hour."""

    def __init__(self, span_exporter: SpanExporter | None = None) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "shunter_requests",
            "API requests by outcome",
            (*_LABELS, "status"),
            registry=self.registry,
        )
        self.ttft = Histogram(
            "gen_ai_server_time_to_first_token_seconds",
            "Time to first streamed token",
            _LABELS,
            buckets=TTFT_BUCKETS,
            registry=self.registry,
        )
        self.tpot = Histogram(
            "gen_ai_server_time_per_output_token_seconds",
            "Time per output token after the first",
            _LABELS,
            buckets=TPOT_BUCKETS,
            registry=self.registry,
        )
        self.duration = Histogram(
            "gen_ai_server_request_duration_seconds",
            "End-to-end request duration",
            _LABELS,
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.tokens = Histogram(
            "gen_ai_client_token_usage",
            "Tokens per request",
            (*_LABELS, "gen_ai_token_type"),
            buckets=TOKEN_BUCKETS,
            registry=self.registry,
        )
        self.cost = Counter(
            "shunter_cost_usd", "Spend from deployment prices", _LABELS, registry=self.registry
        )
        self.decisions = Counter(
            "shunter_route_decisions",
            "Answered requests by the deployment that answered and the policy step that chose it",
            ("model", "deployment", "step"),
            registry=self.registry,
        )
        self.resumes = Counter(
            "shunter_resumes",
            "Streams that failed mid-answer, by the deployment that failed, the cause and "
            "the outcome (resumed on another candidate, failed, unresumable)",
            ("deployment", "cause", "outcome"),
            registry=self.registry,
        )
        self.cascades = Counter(
            "shunter_cascade_steps",
            "Judged cascade steps by the deployment judged and the outcome (served, escalated, "
            "failed)",
            ("model", "deployment", "outcome"),
            registry=self.registry,
        )
        self.session_stops = Counter(
            "shunter_session_stops",
            "Requests refused because their session was stopped, by reason (budget, tokens, loop)",
            ("reason",),
            registry=self.registry,
        )
        self.recent = RecentDecisions()
        self.history = History()
        self.models: frozenset[str] = frozenset()
        self._series: dict[tuple[str, str, str], _Series] = {}
        self._children: dict[tuple[Any, tuple[str, ...]], Any] = {}
        """Labelled children of the counters every request counts, looked up once: their
        labels are the config's models and deployments, operations, steps and statuses."""
        self.tracer_provider: TracerProvider | None = None
        self.tracer: Tracer = NoOpTracer()
        self.tracing = False
        """Whether spans are recorded (some exporter is configured)."""
        self._tracing_set = False
        if span_exporter is not None:
            self._use(tracer_provider(span_exporter))

    def start_tracing(self, environ: Mapping[str, str] | None = None) -> None:
        """Export spans where the ``OTEL_*`` variables say (once; an exporter given at
        construction wins). Raises :class:`~gateway.telemetry.exporters.TelemetryConfigError`
        on a setting it cannot honour."""
        if not self._tracing_set:
            self._use(tracer_provider(environ=environ))

    def _use(self, provider: TracerProvider | None) -> None:
        # with nowhere to export (no provider), recording spans is pure cost on the
        # request path: the tracer stays the no-op one
        self._tracing_set = True
        self.tracer_provider = provider
        self.tracing = provider is not None
        self.tracer = provider.get_tracer("shunter") if provider is not None else NoOpTracer()

    def configure(self, models: frozenset[str]) -> None:
        """The public model names that may appear as ``model`` label values."""
        self.models = models

    def watch(
        self,
        backends: Callable[[], Mapping[str, Backend]],
        breakers: Callable[[], Mapping[str, Any]],
        moves: Callable[[], Mapping[tuple[str, str], Any]] | None = None,
    ) -> None:
        """Expose live backend figures (queue, slots, KV, rates, prefix hits, stalls) and
        each deployment's breaker at scrape time: its state, the fallbacks away from it by
        cause and its probes by result (``breakers``: the dispatcher's circuit breakers,
        which keep those tallies); ``moves``: the KV moves per (source, target) pair."""
        self.registry.register(LiveCollector(backends, breakers, moves))
        self.history.sampler = lambda: engine_figures(backends().values())

    def model_label(self, model: object) -> str:
        """``model`` if the config serves that public name, else ``unknown``."""
        return model if isinstance(model, str) and model in self.models else UNKNOWN_MODEL

    def record(
        self,
        facts: Mapping[str, Any],
        status: int,
        duration_s: float,
        operation: str = "chat",
        traced: RequestTrace | None = None,
    ) -> None:
        """Record one finished API request from the facts its handler gathered (and, with
        ``traced``, the deployment it last tried and the route decision)."""
        model = self.model_label(facts.get("model"))
        answered = facts.get("deployment")
        tried = traced.tried if traced is not None else None
        deployment = str(answered or tried or NO_DEPLOYMENT)
        self._child(self.requests, (operation, model, deployment, str(status))).inc()
        self.history.add(facts, model, status, duration_s)
        stop = facts.get("session_stop")
        if stop in _STOP_REASONS:
            self.session_stops.labels(stop).inc()
        for failed, cause, outcome in facts.get("resumes", ()):
            self.resumes.labels(failed, cause, outcome).inc()
        if facts.get("cascade"):
            self._cascade(operation, model, facts["cascade"])
        step = "-"
        if answered is not None:
            step = deciding_step(traced.decision if traced else None, answered)
            self._child(self.decisions, (model, deployment, step)).inc()
            self._observe(operation, model, deployment, facts, duration_s)
        if traced is not None:
            self.recent.add(
                traced.request_id, operation, facts, deployment, step, status, duration_s
            )

    def _child(self, metric: Any, labels: tuple[str, ...]) -> Any:
        child = self._children.get((metric, labels))
        if child is None:
            child = self._children[metric, labels] = metric.labels(*labels)
        return child

    def _observe(
        self,
        operation: str,
        model: str,
        deployment: str,
        facts: Mapping[str, Any],
        duration_s: float,
    ) -> None:
        key = (operation, model, deployment)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = _Series(self, key)
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

    def _cascade(self, operation: str, model: str, steps: list[dict[str, Any]]) -> None:
        """Each judged step of a cascade; an answer judged and dropped counts its tokens and
        dollars under the deployment that gave it."""
        for step in steps:
            deployment = step["deployment"]
            self.cascades.labels(model, deployment, step["outcome"]).inc()
            if "completion_tokens" in step:
                key = (operation, model, deployment)
                series = self._series.get(key) or self._series.setdefault(key, _Series(self, key))
                series.input_tokens.observe(step["prompt_tokens"])
                series.output_tokens.observe(step["completion_tokens"])
                series.cost.inc(step["cost_usd"])

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def shutdown(self) -> None:
        if self.tracer_provider is not None:
            self.tracer_provider.shutdown()


def tracing(tracer: Tracer) -> bool:
    """Whether ``tracer`` records spans (not the no-op one used when nothing exports)."""
    return not isinstance(tracer, NoOpTracer)


class _Series:
    """The per-(operation, model, deployment) children of the request metrics, looked up
    once."""

    def __init__(self, telemetry: Telemetry, key: tuple[str, str, str]) -> None:
        self.duration = telemetry.duration.labels(*key)
        self.input_tokens = telemetry.tokens.labels(*key, "input")
        self.output_tokens = telemetry.tokens.labels(*key, "output")
        self.cost = telemetry.cost.labels(*key)
        self.ttft = telemetry.ttft.labels(*key)
        self.tpot = telemetry.tpot.labels(*key)
