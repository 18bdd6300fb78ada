"""Load generator for OpenAI-compatible chat endpoints (``shunter bench``).

:mod:`~gateway.loadgen.workload` describes what to send (lengths, shared prefix, arrival
pattern, bounds), :mod:`~gateway.loadgen.runner` sends it and times every request from its SSE
chunks, :mod:`~gateway.loadgen.report` turns the timings into percentiles, throughput and goodput,
and :mod:`~gateway.loadgen.plot` draws a latency-vs-throughput curve across a sweep.
"""

from gateway.loadgen.report import LevelSummary, Percentiles, Slo, render_table, summarize
from gateway.loadgen.runner import Endpoint, LevelRun, RequestResult, run_level
from gateway.loadgen.workload import (
    Bounds,
    Distribution,
    Level,
    RequestSpec,
    Workload,
    WorkloadError,
    parse_levels,
)

__all__ = [
    "Bounds",
    "Distribution",
    "Endpoint",
    "Level",
    "LevelRun",
    "LevelSummary",
    "Percentiles",
    "RequestResult",
    "RequestSpec",
    "Slo",
    "Workload",
    "WorkloadError",
    "parse_levels",
    "render_table",
    "run_level",
    "summarize",
]
