"""The status page's charts: inline SVG from a history series, names escaped, a gap where
nothing was measured, and at most six lines a chart."""

from __future__ import annotations

import re
from xml.etree import ElementTree

from gateway.http.uicharts import MAX_LINES, Chart, charts, legend, svg
from gateway.telemetry.history import MINUTES, History

SVG = "{http://www.w3.org/2000/svg}"


def polylines(chart: Chart) -> list[ElementTree.Element]:
    root = ElementTree.fromstring(str(svg(chart)))  # well-formed XML, or this raises
    return root.findall(f"{SVG}polyline")


def test_every_chart_of_an_empty_hour_draws() -> None:
    drawn = charts(History().series())
    assert [c.id for c in drawn] == [
        "requests", "latency", "ttft", "tokens", "spend-model", "spend-key", "queue", "cache",
    ]  # fmt: skip
    requests = polylines(drawn[0])
    assert [p.get("data-series") for p in requests] == ["requests", "4xx", "5xx"]
    assert polylines(drawn[1]) == []  # no latency measured: no line at all


def test_a_line_breaks_where_nothing_was_measured_and_tops_the_largest_value() -> None:
    values: list[float | None] = [None] * MINUTES
    values[10], values[11], values[40] = 100.0, 180.0, 40.0
    chart = Chart("latency", "Latency", "ms", {"p95": values})
    first, lone = polylines(chart)
    points = [tuple(map(float, p.split(","))) for p in first.get("points", "").split()]
    assert len(points) == 2 and points[1][1] < points[0][1]  # higher value, higher up
    assert len(lone.get("points", "").split()) == 2  # one minute: a short stroke
    labels = re.findall(r'text-anchor="end">([^<]+)<', str(svg(chart)))
    assert "200 ms" in labels  # the top edge: a round number above 180


def test_names_are_escaped_and_lines_are_few() -> None:
    hostile = '<script>alert("x")</script>'
    series = {hostile: [1.0] * MINUTES, **{f"k{i}": [0.1] * MINUTES for i in range(9)}}
    chart = charts({**History().series(), "spend_by_key": series})[5]
    assert len(chart.series) == MAX_LINES and "others" in chart.series
    markup = str(svg(chart)) + str(legend(chart))
    assert hostile not in markup and "&lt;script&gt;" in markup


def test_small_dollars_are_written_without_an_exponent() -> None:
    spend = [0.0] * (MINUTES - 1) + [1.32e-05]
    chart = charts({**History().series(), "spend_by_model": {"chat": spend}})[4]
    assert "$0.0000132" in str(legend(chart)) and "e-" not in str(legend(chart))
