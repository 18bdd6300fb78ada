"""The status page's charts of the last hour: inline SVG drawn on the server.

Each chart is a small line chart of per-minute figures from
:meth:`gateway.telemetry.history.History.series`, oldest minute on the left, now on the
right, its largest value at the top. The SVG is part of the page's markup, so it refreshes
with the panel and needs no script, no font and nothing from another site; its colours
come from the page's stylesheet (``.s0`` ... ``.s5``). Every name shown is escaped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from markupsafe import Markup

WIDTH, HEIGHT = 360, 130
LEFT, RIGHT, TOP, BOTTOM = 60, 6, 8, 18
MAX_LINES = 6
"""Lines a chart draws at most; the smaller series of a chart with more add up as one."""

Values = Sequence[float | int | None]


@dataclass(frozen=True)
class Chart:
    """One chart: its id, title, unit and named series."""

    id: str
    title: str
    unit: str
    series: dict[str, Values]


def charts(history: dict[str, Any]) -> list[Chart]:
    """The page's charts, from a history series."""
    requests = history["requests"]
    hit_share = [
        round(hits / count, 3) if count else None
        for hits, count in zip(history["cache_hits"], requests, strict=True)
    ]
    return [
        Chart(
            "requests",
            "Requests a minute",
            "",
            {
                "requests": requests,
                "4xx": history["client_errors"],
                "5xx": history["errors"],
            },
        ),
        Chart(
            "latency",
            "Latency",
            "ms",
            {"p50": history["duration_p50_ms"], "p95": history["duration_p95_ms"]},
        ),
        Chart(
            "ttft",
            "Time to first token",
            "ms",
            {"p50": history["ttft_p50_ms"], "p95": history["ttft_p95_ms"]},
        ),
        Chart(
            "tokens",
            "Tokens a minute",
            "",
            {"input": history["input_tokens"], "output": history["output_tokens"]},
        ),
        Chart("spend-model", "Spend by model", "$", _fewer(history["spend_by_model"])),
        Chart("spend-key", "Spend by key", "$", _fewer(history["spend_by_key"])),
        Chart("queue", "Engine queue (most waiting)", "", {"queued": history["queue_max"]}),
        Chart(
            "cache",
            "Cache hits",
            "%",
            {
                "prefix cache": _percent(history["prefix_hit_rate"]),
                "response cache": _percent(hit_share),
            },
        ),
    ]


def svg(chart: Chart) -> Markup:
    """The chart as an inline ``<svg>`` element."""
    top = _top([v for values in chart.series.values() for v in values if v is not None])
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    parts = [
        f'<svg viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" '
        f'aria-label="{escape(chart.title)}" xmlns="http://www.w3.org/2000/svg">',
    ]
    for fraction in (0.0, 0.5, 1.0):
        y = TOP + plot_h * (1 - fraction)
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y}" y2="{y}"/>')
        label = _short(top * fraction, chart.unit)
        parts.append(
            f'<text class="axis" x="{LEFT - 4}" y="{y + 4}" text-anchor="end">{label}</text>'
        )
    for x, text, anchor in ((LEFT, "-60 min", "start"), (WIDTH - RIGHT, "now", "end")):
        parts.append(
            f'<text class="axis" x="{x}" y="{HEIGHT - 4}" text-anchor="{anchor}">{text}</text>'
        )
    for index, (name, values) in enumerate(chart.series.items()):
        step = plot_w / max(1, len(values) - 1)
        for run in _runs(values):
            points = " ".join(
                f"{LEFT + i * step:.1f},{TOP + plot_h * (1 - v / top):.1f}" for i, v in run
            )
            parts.append(
                f'<polyline class="s{index}" data-series="{escape(name)}" points="{points}"/>'
            )
    parts.append("</svg>")
    return Markup("".join(parts))


def legend(chart: Chart) -> Markup:
    """The chart's series names, each beside its colour, and its latest value."""
    items = []
    for index, (name, values) in enumerate(chart.series.items()):
        latest = next((v for v in reversed(values) if v is not None), None)
        shown = _short(latest, chart.unit) if latest is not None else "\u2013"
        items.append(
            f'<span class="key"><i class="swatch s{index}"></i>{escape(name)} '
            f'<span class="sub">{shown}</span></span>'
        )
    return Markup("".join(items))


def _runs(values: Values) -> list[list[tuple[float, float]]]:
    """The stretches of consecutive measured minutes (a gap where nothing was measured)."""
    runs: list[list[tuple[float, float]]] = []
    current: list[tuple[float, float]] = []
    for index, value in enumerate(values):
        if value is None:
            if current:
                runs.append(current)
            current = []
        else:
            current.append((index, float(value)))
    if current:
        runs.append(current)
    # a lone minute is drawn as a short flat stroke so that it shows
    return [run if len(run) > 1 else [(run[0][0] - 0.4, run[0][1]), run[0]] for run in runs]


def _fewer(series: dict[str, list[float]]) -> dict[str, Values]:
    """At most :data:`MAX_LINES` lines: the largest, and the rest added up as ``others``."""
    kept: dict[str, Values] = {}
    if len(series) <= MAX_LINES:
        kept.update(series)
        return kept or {"none yet": [0.0] * 60}
    names = list(series)  # largest total first
    kept.update((name, series[name]) for name in names[: MAX_LINES - 1])
    rest = [series[name] for name in names[MAX_LINES - 1 :]]
    kept["others"] = [round(sum(minute), 8) for minute in zip(*rest, strict=True)]
    return kept


def _percent(values: Values) -> Values:
    return [None if v is None else round(v * 100, 1) for v in values]


def _top(values: Sequence[float | int]) -> float:
    """A round upper edge for the chart: 1, 2 or 5 times a power of ten, at least 1."""
    largest = max(values, default=0)
    edge = 1e-6
    while edge < largest:
        for factor in (2, 2.5, 2):
            edge *= factor
            if edge >= largest:
                break
    return max(edge, 1e-6) if largest else 1.0


def _short(value: float | None, unit: str) -> str:
    if value is None:
        return "\u2013"
    if unit == "$":
        return _dollars(value)
    suffix = {"ms": " ms", "%": "%"}.get(unit, "")
    for size, letter in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:.3g}{letter}{suffix}"
    return f"{value:.3g}{suffix}"


def _dollars(value: float) -> str:
    """Dollars without an exponent: ``$0.25``, ``$0.0000132``."""
    if value == 0:
        return "$0"
    digits = max(2, 2 - math.floor(math.log10(abs(value))))
    return f"${value:.{digits}f}".rstrip("0").rstrip(".")
