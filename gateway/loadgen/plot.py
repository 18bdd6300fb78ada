"""Latency-vs-throughput curves across a sweep (``--plot out.png``), drawn with matplotlib.

matplotlib is optional: it is imported only when a plot is drawn.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gateway.loadgen.report import LevelSummary, Percentiles


class PlotUnavailableError(RuntimeError):
    """matplotlib is not installed."""


def _pyplot() -> Any:
    try:
        matplotlib = importlib.import_module("matplotlib")
    except ImportError:
        raise PlotUnavailableError(
            "--plot needs matplotlib: pip install 'matplotlib>=3.8'"
        ) from None
    matplotlib.use("Agg")  # files only, never a window
    return importlib.import_module("matplotlib.pyplot")


def plot_sweep(summaries: Sequence[LevelSummary], path: Path, title: str = "") -> Path:
    """Draw TTFT, TPOT and end-to-end latency (p50 and p99) against output tokens/s, one point
    per level, labelled with the level, and save the figure to ``path`` (PNG, SVG, PDF...)."""
    plt = _pyplot()
    panels: list[tuple[str, str]] = [("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("e2e_ms", "E2E")]
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for ax, (attr, name) in zip(axes[0], panels, strict=True):
        points = [(s, p) for s in summaries if (p := _stat(s, attr)) is not None]
        xs = [s.output_throughput for s, _ in points]
        ax.plot(xs, [p.p50 for _, p in points], marker="o", label="p50")
        ax.plot(xs, [p.p99 for _, p in points], marker="s", linestyle="--", label="p99")
        for s, p in points:
            ax.annotate(
                s.level, (s.output_throughput, p.p50), textcoords="offset points", xytext=(4, 4)
            )
        ax.set_title(f"{name} latency")
        ax.set_xlabel("output tokens/s")
        ax.set_ylabel(f"{name} (ms)")
        ax.grid(True, alpha=0.3)
        ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _stat(summary: LevelSummary, attr: str) -> Percentiles | None:
    value: Percentiles | None = getattr(summary, attr)
    return value
