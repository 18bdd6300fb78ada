"""Calibrating a cascade offline: how a threshold trades accuracy for cost.

Given, for each labelled question, the small model's answer (its token logprobs, whether
it was right, what it cost) and the large model's (right or not, its cost), a cascade with
threshold ``t`` serves the small answer when its confidence is at least ``t`` and pays for
the large one otherwise. :func:`sweep` computes, per threshold, the cascade's accuracy,
the share escalated and the cost; :func:`auroc` says how well a scorer's confidence
separates the small model's right answers from its wrong ones (0.5: not at all, 1:
perfectly); :func:`cheapest_reaching` picks the threshold that reaches a target accuracy
at the least cost. ``shunter calibrate`` and ``bench/cascade_bench.py`` use these.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from policies.confidence import Scorer, confidence

DEFAULT_THRESHOLDS: tuple[float, ...] = tuple(round(0.05 * i, 2) for i in range(21))


@dataclass(frozen=True)
class Outcome:
    """One question's answers: the small model's token logprobs (the ones a cascade judges),
    whether each model was right, and each answer's tokens and dollars."""

    logprobs: tuple[float, ...]
    small_correct: bool
    large_correct: bool
    small_tokens: int = 0
    large_tokens: int = 0
    small_usd: float = 0.0
    large_usd: float = 0.0


@dataclass(frozen=True)
class SweepRow:
    """A cascade at one threshold over the question set (means are per question)."""

    threshold: float
    accuracy: float
    escalated: float
    small_tokens: float
    large_tokens: float
    small_usd: float
    large_usd: float

    @property
    def usd(self) -> float:
        """Dollars per question, both steps together."""
        return self.small_usd + self.large_usd


def sweep(
    outcomes: Sequence[Outcome],
    scorer: Scorer = "mean",
    thresholds: Sequence[float] = DEFAULT_THRESHOLDS,
) -> list[SweepRow]:
    """One row per threshold (``outcomes`` must not be empty)."""
    scores = [confidence(o.logprobs, scorer) for o in outcomes]
    count = len(outcomes)
    rows = []
    for threshold in thresholds:
        up = [s is None or s < threshold for s in scores]
        right = sum(
            o.large_correct if u else o.small_correct for o, u in zip(outcomes, up, strict=True)
        )
        rows.append(
            SweepRow(
                threshold=threshold,
                accuracy=right / count,
                escalated=sum(up) / count,
                small_tokens=sum(o.small_tokens for o in outcomes) / count,
                large_tokens=sum(o.large_tokens for o, u in zip(outcomes, up, strict=True) if u)
                / count,
                small_usd=sum(o.small_usd for o in outcomes) / count,
                large_usd=sum(o.large_usd for o, u in zip(outcomes, up, strict=True) if u) / count,
            )
        )
    return rows


def auroc(outcomes: Sequence[Outcome], scorer: Scorer = "mean") -> float | None:
    """The probability that a right small answer scores above a wrong one (ties count
    half): the area under the ROC curve. ``None`` when all are right or all wrong."""
    scored = [(confidence(o.logprobs, scorer) or 0.0, o.small_correct) for o in outcomes]
    right = sorted(s for s, ok in scored if ok)
    wrong = sorted(s for s, ok in scored if not ok)
    if not right or not wrong:
        return None
    wins = 0.0
    for score in right:
        below = _count_below(wrong, score)
        ties = _count_below(wrong, score, inclusive=True) - below
        wins += below + ties / 2
    return wins / (len(right) * len(wrong))


def _count_below(ordered: Sequence[float], value: float, *, inclusive: bool = False) -> int:
    low, high = 0, len(ordered)
    while low < high:
        mid = (low + high) // 2
        if ordered[mid] < value or (inclusive and ordered[mid] == value):
            low = mid + 1
        else:
            high = mid
    return low


def cheapest_reaching(rows: Sequence[SweepRow], target: float) -> SweepRow | None:
    """The least costly row whose accuracy reaches ``target`` (the lower threshold on a
    tie, escalating less); ``None`` when none does."""
    reaching = [r for r in rows if r.accuracy >= target]
    return min(reaching, key=lambda r: (r.usd, r.threshold)) if reaching else None


def grade(answer: str, accepted: Sequence[str]) -> bool:
    """Whether a short answer says one of the ``accepted`` answers: each is looked for as
    whole words, case, accents and punctuation aside (``"Paris."`` says ``paris``; ``"142"``
    does not say ``42``)."""
    said = f" {_normal(answer)} "
    return any(f" {_normal(a)} " in said for a in accepted if _normal(a))


def _normal(text: str) -> str:
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)  # 1,000 -> 1000
    text = re.sub(r"(?<=\d)\.0+\b", "", text)  # 12.0 -> 12
    return " ".join(re.sub(r"[^a-z0-9.\-/]+", " ", text).replace(". ", " ").split()).strip(".")


@dataclass(frozen=True)
class Labelled:
    """A question and the answers accepted as right."""

    question: str
    answers: tuple[str, ...]


@dataclass(frozen=True)
class Choice:
    """The threshold a scorer needs to reach a target accuracy at the least cost."""

    scorer: Scorer
    row: SweepRow

    def config(self) -> str:
        """The ``cascade:`` line to paste into the model's config."""
        scorer = self.scorer
        shown = scorer if isinstance(scorer, str) else f"{{quantile: {scorer.quantile:g}}}"
        return f"cascade: {{min_confidence: {self.row.threshold:.2f}, scorer: {shown}}}"


def baselines(outcomes: Sequence[Outcome]) -> tuple[SweepRow, SweepRow]:
    """The small step alone and the large step alone, as sweep rows (threshold 0 and 2:
    never and always escalating; dollars of the step that is not asked left out)."""
    count = len(outcomes)
    small = SweepRow(
        threshold=0.0,
        accuracy=sum(o.small_correct for o in outcomes) / count,
        escalated=0.0,
        small_tokens=sum(o.small_tokens for o in outcomes) / count,
        large_tokens=0.0,
        small_usd=sum(o.small_usd for o in outcomes) / count,
        large_usd=0.0,
    )
    large = SweepRow(
        threshold=2.0,
        accuracy=sum(o.large_correct for o in outcomes) / count,
        escalated=1.0,
        small_tokens=0.0,
        large_tokens=sum(o.large_tokens for o in outcomes) / count,
        small_usd=0.0,
        large_usd=sum(o.large_usd for o in outcomes) / count,
    )
    return small, large


def report(
    outcomes: Sequence[Outcome], scorers: Sequence[Scorer], target: float
) -> tuple[str, Choice | None]:
    """The sweep as text (baselines, then per scorer its AUROC and one row per threshold)
    and the cheapest threshold reaching ``target`` over all scorers."""
    from policies.confidence import describe_scorer

    small, large = baselines(outcomes)
    lines = [
        f"small alone: accuracy {small.accuracy:.3f}, ${small.usd:.8f}/question",
        f"large alone: accuracy {large.accuracy:.3f}, ${large.usd:.8f}/question",
    ]
    best: Choice | None = None
    for scorer in scorers:
        rows = sweep(outcomes, scorer)
        area = auroc(outcomes, scorer)
        shown = "n/a (all right or all wrong)" if area is None else f"{area:.3f}"
        lines.append(f"scorer {describe_scorer(scorer)}: AUROC {shown}")
        lines.append(
            "  threshold  accuracy  escalated  small tok  large tok  small $/q   "
            "large $/q   $/question  of large $"
        )
        for row in rows:
            share = row.usd / large.usd if large.usd else 0.0
            lines.append(
                f"  {row.threshold:9.2f}  {row.accuracy:8.3f}  {row.escalated:9.1%}  "
                f"{row.small_tokens:9.1f}  {row.large_tokens:9.1f}  {row.small_usd:10.8f}  "
                f"{row.large_usd:10.8f}  {row.usd:10.8f}  {share:9.1%}"
            )
        found = cheapest_reaching(rows, target)
        if found is not None and (best is None or found.usd < best.row.usd):
            best = Choice(scorer, found)
    if best is None:
        lines.append(f"no threshold reaches accuracy {target:g}")
    else:
        row = best.row
        share = row.usd / large.usd if large.usd else 0.0
        lines.append(
            f"target {target:g}: {best.config()}  (accuracy {row.accuracy:.3f}, escalated "
            f"{row.escalated:.1%}, ${row.usd:.8f}/question, {share:.1%} of the large step's cost)"
        )
    return "\n".join(lines), best
