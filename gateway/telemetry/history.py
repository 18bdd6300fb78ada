"""The last hour, a minute at a time, for the status page's charts.

A ring of :data:`MINUTES` per-minute buckets fed from what :class:`Telemetry.record` already
has for each finished request: its status, duration, time to first token, tokens, spend,
model and key. Recording is a few integer adds and two bisections into fixed latency bounds
(percentiles come from those counts when the page asks); a bucket is reused once its minute
is an hour old. The engines' queue and prefix-cache hits are live figures, not request
facts: they are sampled when the page is built and, between pages, at most every
:data:`SAMPLE_EVERY_S` seconds when a request finishes.

Memory is bounded whatever the traffic: 60 buckets of fixed-size counters, and spend per
model and per key kept for at most :data:`MAX_NAMES` names a minute (the rest add up under
``other``). Model names are the config's public names (or ``unknown``), never a client's.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Iterable
from typing import Any

from backends.base import Backend

MINUTES = 60
MAX_NAMES = 20
SAMPLE_EVERY_S = 5.0
OTHER = "other"
BOUNDS_MS: tuple[float, ...] = tuple(round(2 ** (i / 4), 3) for i in range(81))
"""Upper bounds of the latency counters: a quarter octave apart, 1 ms to about 17 minutes
(a percentile read from them is within 19% of the true one)."""


class Minute:
    """One minute's counters."""

    __slots__ = (
        "cache_hits",
        "client_errors",
        "durations",
        "errors",
        "input_tokens",
        "minute",
        "output_tokens",
        "prefix_hits",
        "prefix_samples",
        "queue_max",
        "requests",
        "spend_by_key",
        "spend_by_model",
        "ttfts",
    )

    def __init__(self, minute: int) -> None:
        self.minute = minute
        self.requests = self.errors = self.client_errors = self.cache_hits = 0
        self.input_tokens = self.output_tokens = 0
        self.durations = [0] * (len(BOUNDS_MS) + 1)
        self.ttfts = [0] * (len(BOUNDS_MS) + 1)
        self.spend_by_model: dict[str, float] = {}
        self.spend_by_key: dict[str, float] = {}
        self.queue_max: int | None = None
        self.prefix_hits = 0.0
        self.prefix_samples = 0


class History:
    """The last :data:`MINUTES` minutes of finished requests and sampled engine figures."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._ring: list[Minute | None] = [None] * MINUTES
        self._sampled_at = 0.0
        self.sampler: Callable[[], tuple[int | None, float | None]] | None = None
        """Reads the engines' live figures: total queue depth and mean prefix-hit rate."""

    def _bucket(self, now: float) -> Minute:
        minute = int(now // 60)
        slot = minute % MINUTES
        bucket = self._ring[slot]
        if bucket is None or bucket.minute != minute:
            bucket = self._ring[slot] = Minute(minute)
        return bucket

    def add(
        self,
        facts: Any,
        model: str,
        status: int,
        duration_s: float,
    ) -> None:
        """One finished request (``facts``: what its handler gathered)."""
        now = self._clock()
        bucket = self._bucket(now)
        bucket.requests += 1
        if status >= 500:
            bucket.errors += 1
        elif status >= 400:
            bucket.client_errors += 1
        bucket.durations[bisect_left(BOUNDS_MS, duration_s * 1000)] += 1
        ttft_ms = facts.get("ttft_ms")
        if ttft_ms is not None:
            bucket.ttfts[bisect_left(BOUNDS_MS, ttft_ms)] += 1
        bucket.input_tokens += facts.get("prompt_tokens") or 0
        bucket.output_tokens += facts.get("completion_tokens") or 0
        if facts.get("cache") == "hit":
            bucket.cache_hits += 1
        cost = facts.get("cost_usd")
        if cost:
            _spend(bucket.spend_by_model, model, cost)
            _spend(bucket.spend_by_key, str(facts.get("key_id") or "-"), cost)
        if now - self._sampled_at >= SAMPLE_EVERY_S:
            self.sample(now)

    def sample(self, now: float | None = None) -> None:
        """Note the engines' live queue and prefix-cache hits in this minute."""
        if self.sampler is None:
            return
        now = self._clock() if now is None else now
        self._sampled_at = now
        queue, prefix_hit_rate = self.sampler()
        bucket = self._bucket(now)
        if queue is not None:
            bucket.queue_max = max(queue, bucket.queue_max or 0)
        if prefix_hit_rate is not None:
            bucket.prefix_hits += prefix_hit_rate
            bucket.prefix_samples += 1

    def series(self, names: dict[str, str] | None = None) -> dict[str, Any]:
        """The last hour, oldest minute first, as JSON-ready lists (``None`` where nothing
        was measured); ``names`` labels key ids with key names."""
        now_minute = int(self._clock() // 60)
        minutes = range(now_minute - MINUTES + 1, now_minute + 1)
        kept = {b.minute: b for b in self._ring if b is not None}
        buckets = [kept.get(m) for m in minutes]
        return {
            "minutes": [m * 60 for m in minutes],
            "requests": [b.requests if b else 0 for b in buckets],
            "errors": [b.errors if b else 0 for b in buckets],
            "client_errors": [b.client_errors if b else 0 for b in buckets],
            "duration_p50_ms": [_percentile(b.durations, 0.5) if b else None for b in buckets],
            "duration_p95_ms": [_percentile(b.durations, 0.95) if b else None for b in buckets],
            "ttft_p50_ms": [_percentile(b.ttfts, 0.5) if b else None for b in buckets],
            "ttft_p95_ms": [_percentile(b.ttfts, 0.95) if b else None for b in buckets],
            "input_tokens": [b.input_tokens if b else 0 for b in buckets],
            "output_tokens": [b.output_tokens if b else 0 for b in buckets],
            "cache_hits": [b.cache_hits if b else 0 for b in buckets],
            "queue_max": [b.queue_max if b else None for b in buckets],
            "prefix_hit_rate": [_mean_hits(b) for b in buckets],
            "spend_by_model": _by_name(buckets, "spend_by_model", {}),
            "spend_by_key": _by_name(buckets, "spend_by_key", names or {}),
        }


def _spend(spend: dict[str, float], name: str, cost: float) -> None:
    if name not in spend and len(spend) >= MAX_NAMES:
        name = OTHER
    spend[name] = spend.get(name, 0.0) + cost


def _percentile(counts: list[int], q: float) -> float | None:
    """The upper bound of the counter holding the ``q`` quantile (``None``: no samples)."""
    total = sum(counts)
    if not total:
        return None
    wanted, seen = q * total, 0
    for index, count in enumerate(counts):
        seen += count
        if seen >= wanted and count:
            return BOUNDS_MS[index] if index < len(BOUNDS_MS) else BOUNDS_MS[-1]
    return BOUNDS_MS[-1]


def _mean_hits(bucket: Minute | None) -> float | None:
    if bucket is None or not bucket.prefix_samples:
        return None
    return round(bucket.prefix_hits / bucket.prefix_samples, 3)


def _by_name(
    buckets: Iterable[Minute | None], field: str, labels: dict[str, str]
) -> dict[str, list[float]]:
    """Per name, its spend in each minute (names in order of their hour's total)."""
    rows = list(buckets)
    totals: dict[str, float] = {}
    for bucket in rows:
        for name, usd in (getattr(bucket, field) if bucket else {}).items():
            totals[name] = totals.get(name, 0.0) + usd
    ordered = sorted(totals, key=lambda n: -totals[n])
    shown = [labels.get(name, name) for name in ordered]
    shown = [
        s if shown.count(s) == 1 else f"{s} ({n})" for s, n in zip(shown, ordered, strict=True)
    ]
    return {
        label: [round(getattr(b, field).get(name, 0.0), 8) if b else 0.0 for b in rows]
        for label, name in zip(shown, ordered, strict=True)
    }


def engine_figures(backends: Iterable[Backend]) -> tuple[int | None, float | None]:
    """The engines' queue depth in all, and their mean prefix-cache hit rate (``None``
    where no backend reports one)."""
    queues, hits = [], []
    for backend in backends:
        stats = backend.stats()
        if stats.queue_depth is not None:
            queues.append(stats.queue_depth)
        if stats.prefix_hit_rate is not None:
            hits.append(stats.prefix_hit_rate)
    return (sum(queues) if queues else None, sum(hits) / len(hits) if hits else None)
