"""Figures of one replayed policy, the comparison table, the JSON record and the plot of
``bench/agent_replay.py``.

Cost: requests the API served at its list price for the tokens the bench counts
(:func:`bench.agent_workload.count_tokens` for the prompt, the recorded answer's length for
the output, what the API streams), plus every local engine at its hourly price for the
policy's wall time (engines are provisioned for the run whether busy or not). The all-API
cost is every request of the same workload at the API's price, no engine.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.agent_api import ApiProfile
from bench.agent_client import Sent
from bench.agent_workload import Session

BASELINE = "least-loaded"


@dataclass
class PolicyRun:
    """Everything measured for one policy in one round."""

    name: str
    policy: list[Any] | dict[str, Any]
    """The policy steps, or (no policy line: the default) the route's fields."""
    round: int
    wall_s: float
    sent: list[Sent]
    worker_stats: dict[str, dict[str, Any]] = field(default_factory=dict)
    api_served: dict[str, Any] = field(default_factory=dict)


def pct(values: Sequence[float], q: float) -> float | None:
    """The q-quantile (nearest rank) of ``values``; ``None`` when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def all_api_usd(sessions: Sequence[Session], api: ApiProfile) -> float:
    """Every turn of the workload sent to the API."""
    return sum(api.usd(t.prompt_tokens, t.max_tokens) for s in sessions for t in s.turns)


def summarize(
    run: PolicyRun, ttft_slo_ms: float, api: ApiProfile, local_usd_per_hour: float
) -> dict[str, Any]:
    """The policy's row: latency, cache, SLO, spill, cost and spread."""
    sent = run.sent
    follow = [s for s in sent if s.turn > 0]
    ok_ms = [1000 * s.ttft_s for s in follow if s.ok and s.ttft_s is not None]
    first_ms = [1000 * s.ttft_s for s in sent if s.turn == 0 and s.ok and s.ttft_s is not None]

    def met(rows: Sequence[Sent]) -> float | None:
        hits = [s.ok and s.ttft_s is not None and 1000 * s.ttft_s <= ttft_slo_ms for s in rows]
        return sum(hits) / len(hits) if hits else None

    local = [s for s in follow if s.ok and s.deployment.startswith("w")]
    prompt = sum(s.prompt_tokens or 0 for s in local)
    on_api = [s for s in sent if s.deployment == "api"]
    workers = len(run.worker_stats)
    api_usd = sum(api.usd(s.prompt_estimate, s.max_tokens) for s in on_api)
    return {
        "policy": run.name, "round": run.round, "requests": len(sent),
        "failed": sum(not s.ok for s in sent), "wall_s": run.wall_s,
        "followup_ttft_p50_ms": pct(ok_ms, 0.5), "followup_ttft_p95_ms": pct(ok_ms, 0.95),
        "first_ttft_p50_ms": pct(first_ms, 0.5), "first_ttft_p95_ms": pct(first_ms, 0.95),
        "followup_cache_hit": sum(s.cached_tokens for s in local) / prompt if prompt else None,
        "worker_cache_hit": _worker_hit(run.worker_stats),
        "slo_met": met(sent), "slo_met_in_bursts": met([s for s in sent if s.in_burst]),
        "spilled": len(on_api) / len(sent) if sent else 0.0,
        "usd": api_usd + local_usd_per_hour * workers * run.wall_s / 3600,
        "api_usd": api_usd, "share": _share(sent), "deployments_per_session": _spread(sent),
        "sessions_per_deployment": _sessions_on(sent),
    }  # fmt: skip


def _worker_hit(stats: dict[str, dict[str, Any]]) -> float | None:
    """Prompt tokens served from cached KV over all prompt tokens, every worker together
    (the engines' own counters; warm-up and health probes included)."""
    hits = sum(s.get("prefix_hit_tokens") or 0 for s in stats.values())
    total = sum(
        (s.get("prefix_hit_tokens") or 0) / s["prefix_hit_rate"]
        for s in stats.values()
        if s.get("prefix_hit_rate")
    )
    return hits / total if total else None


def _share(sent: Sequence[Sent]) -> dict[str, float]:
    counts = Counter(s.deployment or "none" for s in sent)
    return {name: n / len(sent) for name, n in sorted(counts.items())}


def _spread(sent: Sequence[Sent]) -> float | None:
    """Mean number of distinct deployments one session's turns went to."""
    seen: dict[int, set[str]] = defaultdict(set)
    for s in sent:
        seen[s.session].add(s.deployment)
    return statistics.fmean(len(v) for v in seen.values()) if seen else None


def _sessions_on(sent: Sequence[Sent]) -> dict[str, int]:
    seen: dict[str, set[int]] = defaultdict(set)
    for s in sent:
        seen[s.deployment or "none"].add(s.session)
    return {name: len(v) for name, v in sorted(seen.items())}


def pooled(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Rows of one policy over rounds: the median of each number, the first of the rest."""
    out = dict(rows[0])
    for key, value in rows[0].items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            values = [r[key] for r in rows if r[key] is not None]
            out[key] = statistics.median(values) if values else None
    return out


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def _pc(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.2f}x"


def table(rows: Sequence[dict[str, Any]], all_api: float) -> str:
    """The comparison, one row per policy, ratios against least-loaded."""
    base = next((r for r in rows if r["policy"] == BASELINE), None)
    head = (
        "policy | follow-up TTFT p50 / p95 ms | first-turn TTFT p50 / p95 ms | follow-up "
        "cache hit | engines' hit | SLO met | in bursts | spilled | cost vs all-API "
        "| sessions on | turns per deployment | deployments / session | p50, p95, SLO, "
        "cost vs least-loaded"
    )
    lines = [f"| {head} |", "|---" * (head.count("|") + 1) + "|"]
    for r in rows:
        spread = " ".join(f"{k} {v}" for k, v in r["sessions_per_deployment"].items())
        share = "/".join(f"{k} {_pc(v)}" for k, v in r["share"].items())
        vs = "-" if base is None else ", ".join((
            _ratio(r["followup_ttft_p50_ms"], base["followup_ttft_p50_ms"]),
            _ratio(r["followup_ttft_p95_ms"], base["followup_ttft_p95_ms"]),
            _ratio(r["slo_met"], base["slo_met"]), _ratio(r["usd"], base["usd"]),
        ))  # fmt: skip
        lines.append(
            f"| {r['policy']} | {_ms(r['followup_ttft_p50_ms'])} / "
            f"{_ms(r['followup_ttft_p95_ms'])} | {_ms(r['first_ttft_p50_ms'])} / "
            f"{_ms(r['first_ttft_p95_ms'])} | {_pc(r['followup_cache_hit'])} "
            f"| {_pc(r['worker_cache_hit'])} | {_pc(r['slo_met'])} "
            f"| {_pc(r['slo_met_in_bursts'])} | {_pc(r['spilled'])} | {_pc(r['usd'] / all_api)} "
            f"| {spread} | {share} | {r['deployments_per_session']:.2f} | {vs} |"
        )
    return "\n".join(lines)


def write_json(path: Path, meta: dict[str, Any], rows: list[dict[str, Any]],
               runs: Sequence[PolicyRun], sim: list[dict[str, Any]]) -> None:  # fmt: skip
    """Everything: the settings, pooled rows, every request of every run, the simulation."""
    record = {
        "meta": meta, "policies": rows, "simulation": sim,
        "runs": [
            {"policy": r.name, "round": r.round, "wall_s": r.wall_s,
             "worker_stats": r.worker_stats, "api_served": r.api_served,
             "requests": [asdict(s) for s in r.sent]}
            for r in runs
        ],
    }  # fmt: skip
    path.write_text(json.dumps(record, indent=1))


def plot(path: Path, rows: Sequence[dict[str, Any]], all_api: float, slo_ms: float) -> str:
    """A PNG of follow-up TTFT, SLO attainment and cost per policy; the line to print."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "plot: skipped (matplotlib is not installed: pip install 'shunter[plot]')"
    names = [r["policy"] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    x = range(len(rows))
    p50 = [r["followup_ttft_p50_ms"] or 0 for r in rows]
    p95 = [r["followup_ttft_p95_ms"] or 0 for r in rows]
    axes[0].bar([i - 0.2 for i in x], p50, 0.4, label="p50")
    axes[0].bar([i + 0.2 for i in x], p95, 0.4, label="p95")
    axes[0].axhline(slo_ms, color="grey", linestyle="--", label="TTFT target")
    axes[0].set_title("follow-up turn TTFT (ms)")
    axes[0].legend()
    met = [100 * (r["slo_met"] or 0) for r in rows]
    burst = [100 * (r["slo_met_in_bursts"] or 0) for r in rows]
    axes[1].bar([i - 0.2 for i in x], met, 0.4, label="all")
    axes[1].bar([i + 0.2 for i in x], burst, 0.4, label="in bursts")
    axes[1].set_title(f"SLO met (%), TTFT <= {slo_ms:g} ms")
    axes[1].legend()
    axes[2].bar(list(x), [100 * r["usd"] / all_api for r in rows])
    axes[2].set_title("cost, % of all-API")
    for ax in axes:
        ax.set_xticks(list(x), names, rotation=20, ha="right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"plot: {path}"
