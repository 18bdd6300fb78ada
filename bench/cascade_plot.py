"""The cascade benchmark's plot: accuracy against cost along the sweep (matplotlib)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from policies import Scorer
from policies.calibration import Outcome, baselines, sweep
from policies.confidence import describe_scorer


def plot(outcomes: Sequence[Outcome], scorers: Sequence[Scorer], path: Path) -> None:
    """Accuracy against dollars per question, one curve per scorer, and both steps alone."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    small, large = baselines(outcomes)
    figure, axes = plt.subplots(figsize=(7, 5))
    for scorer in scorers:
        rows = sweep(outcomes, scorer)
        axes.plot(
            [r.usd * 1e6 for r in rows],
            [r.accuracy for r in rows],
            marker=".",
            label=describe_scorer(scorer),
        )
    axes.scatter(
        [small.usd * 1e6], [small.accuracy], marker="s", color="black", label="small alone"
    )
    axes.scatter(
        [large.usd * 1e6], [large.accuracy], marker="*", s=120, color="red", label="large alone"
    )
    axes.set_xlabel("$ per million questions")
    axes.set_ylabel("accuracy")
    axes.set_title("Cascade SmolLM2-135M -> answer key, sweep of min_confidence")
    axes.legend()
    figure.savefig(path, dpi=120, bbox_inches="tight")
