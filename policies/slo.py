"""The ``slo`` step: demote (or drop) candidates predicted to miss latency targets.

``slo: {ttft_ms: 500, tpot_ms: 50}`` predicts TTFT and TPOT (:mod:`policies.predict`) and
sorts candidates into three tiers: *meets* (every prediction within target), *unknown*
(some figure missing: a new deployment gets traffic and so gets measured), and *misses*
ordered by badness, the worst ratio of prediction to target. Within the meets and
unknown tiers later rankers decide.

``mode: demote`` (default) keeps missers as fallbacks at the back. ``mode: drop`` removes
them. Either way, if no candidate meets or is unknown, the least-bad comes first (with
``drop``, it alone is kept) and the decision says so.

Predicted TTFT counts only the prompt tokens a candidate does not hold in its KV cache.
When the candidate that would lead (the one holding the longest prefix of the request,
else the first configured) is predicted to miss the TTFT target while another is not, the
request *spills*: it goes to the next candidate at once instead of queueing, and the
decision says ``spill: predicted ttft X ms > slo Y ms on <candidate>``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from policies.facts import Candidate
from policies.outcome import StepNote
from policies.predict import predict_tpot_ms, predict_ttft_ms
from policies.prefix import cached_chars
from policies.steps import Entry, FastOutcome, RouteContext, Step, StepOutcome

_MEETS, _UNKNOWN = 0.0, 1.0


class SloArgs(BaseModel):
    """Targets in milliseconds (at least one) and what to do with candidates that miss."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttft_ms: float | None = Field(default=None, gt=0)
    tpot_ms: float | None = Field(default=None, gt=0)
    mode: Literal["demote", "drop"] = "demote"

    @model_validator(mode="after")
    def _one_target(self) -> SloArgs:
        if self.ttft_ms is None and self.tpot_ms is None:
            raise ValueError("set ttft_ms or tpot_ms")
        return self


@dataclass(frozen=True)
class SloEstimate:
    """Predictions for one candidate against the targets; ``badness`` > 1 means a miss."""

    ttft_ms: float | None
    tpot_ms: float | None
    badness: float | None

    @property
    def key(self) -> float:
        """Sort key: 0 meets, 1 unknown, 1 + badness (> 2) misses."""
        if self.badness is None:
            return _UNKNOWN
        return _MEETS if self.badness <= 1.0 else 1.0 + self.badness


def estimate(ctx: RouteContext, cand: Candidate, args: SloArgs) -> SloEstimate:
    """Predict TTFT/TPOT and the worst prediction-to-target ratio (``None`` if unknown)."""
    ttft = predict_ttft_ms(ctx.request, cand) if args.ttft_ms is not None else None
    tpot = predict_tpot_ms(cand) if args.tpot_ms is not None else None
    ratios: list[float] = []
    for target, value in ((args.ttft_ms, ttft), (args.tpot_ms, tpot)):
        if target is None:
            continue
        if value is None:
            return SloEstimate(ttft, tpot, None)
        ratios.append(value / target)
    return SloEstimate(ttft, tpot, max(ratios))


def _spill(
    ctx: RouteContext, cands: list[Candidate], ests: list[SloEstimate], args: SloArgs
) -> str | None:
    """The spill remark when the candidate that would lead misses the TTFT target (some
    other candidate does not: the caller checked)."""
    target = args.ttft_ms
    if target is None or not cands:
        return None
    cached = [cached_chars(ctx.request, cand) for cand in cands]
    lead = max(range(len(cands)), key=lambda i: (cached[i], -i))
    ttft = ests[lead].ttft_ms
    if ttft is None or ttft <= target:
        return None
    return f"spill: predicted ttft {ttft:.0f} ms > slo {target:g} ms on {cands[lead].name}"


def _detail(est: SloEstimate, args: SloArgs) -> str:
    parts = []
    if args.ttft_ms is not None:
        shown = "?" if est.ttft_ms is None else f"{est.ttft_ms:.0f}"
        parts.append(f"ttft~{shown}/{args.ttft_ms:g}ms")
    if args.tpot_ms is not None:
        shown = "?" if est.tpot_ms is None else f"{est.tpot_ms:.0f}"
        parts.append(f"tpot~{shown}/{args.tpot_ms:g}ms")
    key = est.key
    verdict = "ok" if key == _MEETS else "unknown" if key == _UNKNOWN else "miss"
    return f"{verdict} " + " ".join(parts)


class Slo(Step):
    """Latency-SLO ranker (see the module docstring)."""

    name = "slo"
    args_model = SloArgs

    def __init__(self, args: SloArgs) -> None:
        self.args = args

    def apply(self, ctx: RouteContext, entries: list[Entry]) -> StepOutcome:
        """Score every entry by tier; in ``drop`` mode remove missers (keep least-bad)."""
        scored: list[tuple[Entry, SloEstimate]] = []
        for entry in entries:
            est = estimate(ctx, entry.candidate, self.args)
            entry.keys.append(est.key)
            entry.notes.append(StepNote(self.name, "score", _detail(est, self.args), est.key))
            scored.append((entry, est))
        hopeful = [e for e, est in scored if est.key <= _UNKNOWN]
        if hopeful:
            cands, ests = [e.candidate for e in entries], [est for _, est in scored]
            spill = _spill(ctx, cands, ests, self.args)
            if self.args.mode == "demote":
                return StepOutcome(kept=entries, remark=spill)
            missers = [e for e, est in scored if est.key > _UNKNOWN]
            for entry in missers:
                entry.notes[-1] = StepNote(self.name, "drop", entry.notes[-1].detail)
            return StepOutcome(kept=hopeful, dropped=missers, remark=spill)
        return self._none_meets(entries)

    def apply_fast(self, ctx: RouteContext, cands: list[Candidate]) -> FastOutcome:
        """:meth:`apply`'s tiers and survivors; the least-bad's note only when rescued."""
        args = self.args
        ests = [estimate(ctx, cand, args) for cand in cands]
        keys = [est.key for est in ests]
        everyone = list(range(len(cands)))
        if any(key <= _UNKNOWN for key in keys):
            spill = _spill(ctx, cands, ests, args)
            if args.mode == "demote":
                return FastOutcome(everyone, keys=keys, remark=spill)
            kept = [i for i, key in enumerate(keys) if key <= _UNKNOWN]
            dropped = [i for i, key in enumerate(keys) if key > _UNKNOWN]
            return FastOutcome(kept, dropped, keys=keys, remark=spill)
        best = min(everyone, key=lambda i: (keys[i], i))
        remark = f"slo: none predicted to meet, least-bad {cands[best].name}"
        if args.mode == "demote":
            return FastOutcome(everyone, keys=keys, remark=remark)
        detail = _detail(estimate(ctx, cands[best], args), args)
        rescued = StepNote(self.name, "rescued", f"least-bad: {detail}")
        rest = [i for i in everyone if i != best]
        return FastOutcome([best], rest, keys, remark, {best: rescued})

    def note(self, ctx: RouteContext, cand: Candidate) -> StepNote:
        """A score note with the predictions."""
        est = estimate(ctx, cand, self.args)
        return StepNote(self.name, "score", _detail(est, self.args), est.key)

    def _none_meets(self, entries: list[Entry]) -> StepOutcome:
        if not entries:
            return StepOutcome(kept=[])
        best = min(entries, key=lambda e: (e.keys[-1], e.order))
        remark = f"slo: none predicted to meet, least-bad {best.candidate.name}"
        if self.args.mode == "demote":
            return StepOutcome(kept=entries, remark=remark)
        rest = [e for e in entries if e is not best]
        for entry in rest:
            entry.notes[-1] = StepNote(self.name, "drop", entry.notes[-1].detail)
        best.notes[-1] = StepNote(self.name, "rescued", f"least-bad: {best.notes[-1].detail}")
        return StepOutcome(kept=[best], dropped=rest, remark=remark)

    def describe(self) -> str:
        """The step with its targets."""
        args = self.args.model_dump(exclude_defaults=True)
        return f"{self.name}(" + ",".join(f"{k}={v}" for k, v in args.items()) + ")"
