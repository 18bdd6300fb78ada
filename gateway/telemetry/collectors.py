"""Figures read at scrape time: each deployment's engine (queue, slots, KV, rates, prefix
hits, stalls) and its circuit breaker. Label values are deployment names from the config
and fixed value sets only."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from backends.base import Backend, LiveStats

_ENGINE = ["deployment"]


class LiveCollector(Collector):
    """Every deployment's live figures and breaker, at scrape time."""

    def __init__(
        self,
        backends: Callable[[], Mapping[str, Backend]],
        breakers: Callable[[], Mapping[str, Any]],
        moves: Callable[[], Mapping[tuple[str, str], Any]] | None = None,
    ) -> None:
        self._backends = backends
        self._breakers = breakers
        self._moves = moves

    def collect(self) -> Iterable[Metric]:
        families = _EngineFamilies()
        breakers = self._breakers()
        yield from breaker_families(breakers)
        if self._moves is not None:
            yield from move_families(self._moves())
        for name, backend in self._backends().items():
            breaker = breakers.get(name)
            families.add(name, backend.stats(), None if breaker is None else breaker.state)
        yield from families.all()


class _EngineFamilies:
    """The per-deployment gauges, filled one deployment at a time."""

    def __init__(self) -> None:
        gauge = GaugeMetricFamily
        self.queue = gauge("shunter_queue_depth", "Requests waiting", labels=_ENGINE)
        self.in_flight = gauge("shunter_in_flight", "Requests running or waiting", labels=_ENGINE)
        self.slots = gauge("shunter_slots_busy", "Busy sequence slots", labels=_ENGINE)
        self.slots_total = gauge("shunter_slots_total", "Sequence slots", labels=_ENGINE)
        self.kv = gauge(
            "shunter_kv_cache_usage_ratio", "KV cache cells in use (0-1)", labels=_ENGINE
        )
        self.prefill = gauge(
            "shunter_prefill_tokens_per_second",
            "Prompt tokens prefilled per second (recent)",
            labels=_ENGINE,
        )
        self.decode = gauge(
            "shunter_decode_tokens_per_second",
            "Tokens generated per second (recent)",
            labels=_ENGINE,
        )
        self.prefix_rate = gauge(
            "shunter_prefix_cache_hit_ratio",
            "Share of prompt tokens served from cached KV (0-1)",
            labels=_ENGINE,
        )
        self.prefix_tokens = CounterMetricFamily(
            "shunter_prefix_cache_hit_tokens",
            "Prompt tokens served from cached KV instead of prefilled",
            labels=_ENGINE,
        )
        self.stalled = gauge(
            "shunter_engine_stalled",
            "1 while an in-process engine with work makes no progress",
            labels=_ENGINE,
        )
        self.cooled = gauge(
            "shunter_deployment_cooled_down", "1 while the breaker is open", labels=_ENGINE
        )
        self.loaded = gauge(
            "shunter_model_loaded",
            "1 while a local model loaded on demand is in memory",
            labels=_ENGINE,
        )

    def add(self, name: str, stats: LiveStats, breaker: str | None) -> None:
        labels = [name]
        self.queue.add_metric(labels, stats.queue_depth)
        self.in_flight.add_metric(labels, stats.in_flight)
        optional = (
            (self.slots, stats.slots_busy),
            (self.slots_total, stats.slots_total),
            (self.prefill, stats.prefill_tokens_per_s),
            (self.decode, stats.decode_tokens_per_s),
            (self.prefix_rate, stats.prefix_hit_rate),
            (self.prefix_tokens, stats.prefix_hit_tokens),
        )
        for family, value in optional:
            if value is not None:
                family.add_metric(labels, value)
        if stats.kv_used is not None and stats.kv_total:
            self.kv.add_metric(labels, stats.kv_used / stats.kv_total)
        if stats.stalled is not None:
            self.stalled.add_metric(labels, 1.0 if stats.stalled else 0.0)
        if stats.loaded is not None:
            self.loaded.add_metric(labels, 1.0 if stats.loaded else 0.0)
        if breaker is not None:
            self.cooled.add_metric(labels, 1.0 if breaker == "open" else 0.0)

    def all(self) -> tuple[Metric, ...]:
        return (
            self.queue,
            self.in_flight,
            self.slots,
            self.slots_total,
            self.kv,
            self.prefill,
            self.decode,
            self.prefix_rate,
            self.prefix_tokens,
            self.stalled,
            self.cooled,
            self.loaded,
        )


def breaker_families(breakers: Mapping[str, Any]) -> tuple[Metric, ...]:
    """Breaker state (one series per state, 1 for the current one), fallbacks away from each
    deployment by cause, and background probes by result."""
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


def move_families(pairs: Mapping[tuple[str, str], Any]) -> tuple[Metric, ...]:
    """KV caches moved between deployments (``pairs``: per (source, target), tallies with
    ``moved``, ``failed``, ``n_bytes`` and ``seconds``): moves by outcome, bytes, seconds."""
    labels = ["source", "target"]
    moves = CounterMetricFamily(
        "shunter_kv_moves",
        "KV caches moved from one deployment to another, by outcome (moved, failed)",
        labels=[*labels, "outcome"],
    )
    moved_bytes = CounterMetricFamily(
        "shunter_kv_move_bytes", "Bytes of KV state moved between deployments", labels=labels
    )
    seconds = CounterMetricFamily(
        "shunter_kv_move_seconds",
        "Seconds spent moving KV state between deployments (failed moves too)",
        labels=labels,
    )
    for (source, target), tally in sorted(pairs.items()):
        moves.add_metric([source, target, "moved"], tally.moved)
        moves.add_metric([source, target, "failed"], tally.failed)
        moved_bytes.add_metric([source, target], tally.n_bytes)
        seconds.add_metric([source, target], tally.seconds)
    return moves, moved_bytes, seconds
