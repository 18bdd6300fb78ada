"""Summaries of a benchmark level: latency percentiles, throughput, errors and goodput."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from gateway.loadgen.runner import LevelRun, RequestResult

if TYPE_CHECKING:
    from rich.table import Table


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) with linear interpolation (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class Percentiles:
    """p50/p90/p99 and mean of a latency, in milliseconds, over ``n`` samples."""

    p50: float
    p90: float
    p99: float
    mean: float
    n: int

    @classmethod
    def of_seconds(cls, values: Sequence[float]) -> Percentiles | None:
        """Percentiles of latencies given in seconds; ``None`` without samples."""
        if not values:
            return None
        ms = [v * 1000 for v in values]
        return cls(
            p50=percentile(ms, 50),
            p90=percentile(ms, 90),
            p99=percentile(ms, 99),
            mean=sum(ms) / len(ms),
            n=len(ms),
        )

    def cell(self) -> str:
        """``p50 / p90 / p99`` for a table cell."""
        return "/".join(_ms(v) for v in (self.p50, self.p90, self.p99))


@dataclass(frozen=True)
class Slo:
    """Latency objectives for goodput; an unset objective always holds."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None

    def met(self, result: RequestResult) -> bool:
        """Whether a request succeeded within both objectives."""
        if not result.ok:
            return False
        if self.ttft_ms is not None and (
            result.ttft_s is None or result.ttft_s * 1000 > self.ttft_ms
        ):
            return False
        return self.tpot_ms is None or result.tpot_s is None or result.tpot_s * 1000 <= self.tpot_ms


@dataclass(frozen=True)
class LevelSummary:
    """Everything reported for one level. Throughputs divide by the level's wall time."""

    level: str
    mode: str
    value: float
    requests: int
    completed: int
    failed: int
    errors: dict[str, int]
    first_error: str | None
    duration_s: float
    request_throughput: float
    output_throughput: float
    output_tokens: int
    prompt_tokens: int
    usage_reported: int
    ttft_ms: Percentiles | None
    tpot_ms: Percentiles | None
    itl_ms: Percentiles | None
    e2e_ms: Percentiles | None
    goodput: int
    goodput_throughput: float

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


def summarize(run: LevelRun, slo: Slo | None = None) -> LevelSummary:
    """Summarize one level's results against ``slo``."""
    slo = slo or Slo()
    ok = [r for r in run.results if r.ok]
    failed = [r for r in run.results if not r.ok]
    duration = max(run.duration_s, 1e-9)
    output_tokens = sum(r.output_tokens for r in ok)
    goodput = sum(1 for r in ok if slo.met(r))
    return LevelSummary(
        level=run.level.label,
        mode=run.level.mode,
        value=run.level.value,
        requests=len(run.results),
        completed=len(ok),
        failed=len(failed),
        errors=dict(sorted(Counter(str(r.error) for r in failed).items())),
        first_error=next((f"{r.error}: {r.detail}" for r in failed), None),
        duration_s=run.duration_s,
        request_throughput=len(ok) / duration,
        output_throughput=output_tokens / duration,
        output_tokens=output_tokens,
        prompt_tokens=sum(r.prompt_tokens or 0 for r in ok),
        usage_reported=sum(1 for r in ok if r.usage_reported),
        ttft_ms=Percentiles.of_seconds([r.ttft_s for r in ok if r.ttft_s is not None]),
        tpot_ms=Percentiles.of_seconds([r.tpot_s for r in ok if r.tpot_s is not None]),
        itl_ms=Percentiles.of_seconds([gap for r in ok for gap in r.itl_s]),
        e2e_ms=Percentiles.of_seconds([r.e2e_s for r in ok]),
        goodput=goodput,
        goodput_throughput=goodput / duration,
    )


def render_table(summaries: Sequence[LevelSummary], title: str = "shunter bench") -> Table:
    """A rich table, one row per level."""
    from rich import box
    from rich.table import Table

    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("level", overflow="fold")
    for name in ("ok", "req/s", "out tok/s"):
        table.add_column(name, justify="right", overflow="fold")
    for name in ("TTFT ms", "TPOT ms", "E2E ms"):  # fold, never cut, in narrow terminals
        table.add_column(f"{name}\np50/p90/p99", justify="right", overflow="fold")
    table.add_column("goodput", justify="right", overflow="fold")
    table.add_column("errors", overflow="fold")
    for s in summaries:
        table.add_row(
            s.level,
            f"{s.completed}/{s.requests}",
            f"{s.request_throughput:.2f}",
            f"{s.output_throughput:.1f}",
            *(p.cell() if p is not None else "-" for p in (s.ttft_ms, s.tpot_ms, s.e2e_ms)),
            f"{s.goodput} ({s.goodput_throughput:.2f}/s)" if s.completed else "0",
            " ".join(f"{kind}:{n}" for kind, n in s.errors.items()) or "-",
        )
    return table


def _ms(value: float) -> str:
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}"
