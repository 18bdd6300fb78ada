"""The two shapes of a policy step, and the working state a policy threads through them.

A *filter* says pass or drop for each candidate. What happens when it would drop them
all is the filter's documented choice (:attr:`FilterStep.on_empty`): ``reject`` leaves
the request with no candidate (the gateway answers with an error), ``keep_least_bad``
keeps the one with the lowest badness and says so.

A *ranker* gives each candidate a score, lower is better. Rankers compose like SQL's
``ORDER BY a, b``: the first ranker in the policy decides, later ones break its ties,
and the config order breaks the rest.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from policies.facts import Candidate, RequestFacts
from policies.outcome import StepNote
from policies.pool import KindOf, Kinds

OnEmpty = Literal["reject", "keep_least_bad"]


class NoArgs(BaseModel):
    """Arguments of a primitive that takes none."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class RouteContext:
    """What every step may look at besides the candidate: the request and the clock."""

    request: RequestFacts
    now: float = 0.0


@dataclass
class Entry:
    """A candidate in flight through one routing call (mutable, private to that call)."""

    candidate: Candidate
    order: int
    keys: list[float] = field(default_factory=list)
    notes: list[StepNote] = field(default_factory=list)


@dataclass
class StepOutcome:
    """What a step leaves behind: survivors, newly dropped entries, an optional remark."""

    kept: list[Entry]
    dropped: list[Entry] = field(default_factory=list)
    remark: str | None = None


@dataclass
class FastOutcome:
    """What a step leaves behind on the fast path, by position in the list it was given:
    survivors and newly dropped (in that list's order), each position's sort key (rankers
    only), an optional remark, and the notes that differ from :meth:`Step.note` (a rescue)."""

    kept: list[int]
    dropped: list[int] = field(default_factory=list)
    keys: list[float] | None = None
    remark: str | None = None
    special: dict[int, StepNote] = field(default_factory=dict)


@dataclass(frozen=True)
class Check:
    """A filter's verdict on one candidate; ``badness`` orders last-resort rescue."""

    ok: bool
    detail: str
    badness: float = 0.0


@dataclass(frozen=True)
class Score:
    """A ranker's score for one candidate (lower ranks first)."""

    key: float
    detail: str


class Step(ABC):
    """A named, configured policy step."""

    name: ClassVar[str]
    args_model: ClassVar[type[BaseModel]] = NoArgs
    reads_live: bool = True
    """Whether the step looks at ``Candidate.live``: when no step does, the gateway need
    not measure every deployment for a request. Safe default: yes."""

    @abstractmethod
    def apply(self, ctx: RouteContext, entries: list[Entry]) -> StepOutcome:
        """Run over the surviving entries, adding notes (and scores) to them."""

    def apply_fast(self, ctx: RouteContext, cands: list[Candidate]) -> FastOutcome | None:
        """The same verdicts and keys as :meth:`apply`, without notes for everyone;
        ``None`` (the default) means the step has no fast form (the policy then takes
        the full path)."""
        return None

    def note(self, ctx: RouteContext, cand: Candidate) -> StepNote:
        """The note :meth:`apply` leaves on a candidate it keeps without rescue."""
        raise NotImplementedError(self.name)

    def describe(self) -> str:
        """The step as it would be written in YAML, for display."""
        return self.name


class FilterStep(Step):
    """Base for filters: implement :meth:`check`; choose :attr:`on_empty`."""

    on_empty: ClassVar[OnEmpty] = "reject"
    kind_of: KindOf | None = None
    """What of a candidate's facts :meth:`passes` reads besides the request and the clock,
    where that is all it reads: candidates of one kind then get one verdict, and over a
    :class:`~policies.pool.Pool` the fast path asks about one candidate of each kind
    (:meth:`apply_by_kind`). ``None``: each candidate is asked about."""

    @abstractmethod
    def check(self, ctx: RouteContext, cand: Candidate) -> Check:
        """Pass or drop one candidate, with a short reason."""

    def passes(self, ctx: RouteContext, cand: Candidate) -> bool:
        """``check(...).ok`` without the detail; override where that is cheaper."""
        return self.check(ctx, cand).ok

    def apply(self, ctx: RouteContext, entries: list[Entry]) -> StepOutcome:
        """Drop failing entries; if none survive, apply :attr:`on_empty`."""
        return run_filter(self.name, self.on_empty, entries, lambda c: self.check(ctx, c))

    def apply_fast(self, ctx: RouteContext, cands: list[Candidate]) -> FastOutcome | None:
        """Verdicts only; details are written for the last-resort rescue alone. A
        subclass that overrides :meth:`apply` alone gets the full path."""
        if _own(self, FilterStep.apply, FilterStep.apply_fast):
            return None
        passes = self.passes
        verdicts = [passes(ctx, cand) for cand in cands]
        if all(verdicts):
            return FastOutcome(list(range(len(cands))))
        kept = [i for i, ok in enumerate(verdicts) if ok]
        dropped = [i for i, ok in enumerate(verdicts) if not ok]
        if kept:
            return FastOutcome(kept, dropped)
        if self.on_empty == "reject":
            return FastOutcome([], dropped, remark=f"{self.name}: no candidate passes")
        checks = [(self.check(ctx, cands[i]), i) for i in dropped]
        best_check, best = min(checks, key=lambda pair: (pair[0].badness, pair[1]))
        rescued = StepNote(self.name, "rescued", f"last resort: {best_check.detail}")
        rest = [i for i in dropped if i != best]
        remark = f"{self.name}: none passed, kept {cands[best].name}"
        return FastOutcome([best], rest, remark=remark, special={best: rescued})

    def apply_by_kind(
        self, ctx: RouteContext, kinds: Kinds, at: Sequence[int]
    ) -> FastOutcome | None:
        """:meth:`apply_fast` over the pool's candidates at positions ``at``, with one
        verdict per kind; ``None`` where every one is dropped (:meth:`apply_fast` then
        writes the rescue or the remark) or the class has no fast form."""
        if _own(self, FilterStep.apply, FilterStep.apply_fast):
            return None
        passes = self.passes
        verdicts = [passes(ctx, sample) for sample in kinds.samples]
        if all(verdicts):
            return FastOutcome(list(range(len(at))))
        of = kinds.of
        kept = [p for p, i in enumerate(at) if verdicts[of[i]]]
        if not kept:
            return None
        return FastOutcome(kept, [p for p, i in enumerate(at) if not verdicts[of[i]]])

    def note(self, ctx: RouteContext, cand: Candidate) -> StepNote:
        """A pass note with the check's detail."""
        return StepNote(self.name, "pass", self.check(ctx, cand).detail)


class RankStep(Step):
    """Base for rankers: implement :meth:`score`."""

    @abstractmethod
    def score(self, ctx: RouteContext, cand: Candidate) -> Score:
        """Score one candidate; lower ranks first."""

    constant: ClassVar[bool] = False
    """Every candidate gets the same key (``first``): the fast path skips scoring."""

    def key(self, ctx: RouteContext, cand: Candidate) -> float:
        """``score(...).key`` without the detail; override where that is cheaper."""
        return self.score(ctx, cand).key

    def remark(self, ctx: RouteContext, cands: list[Candidate]) -> str | None:
        """A policy-level remark about the scored candidates (none by default)."""
        return None

    def apply_fast(self, ctx: RouteContext, cands: list[Candidate]) -> FastOutcome | None:
        """Keys only (none for a constant ranker). A subclass that overrides
        :meth:`apply` alone gets the full path."""
        if _own(self, RankStep.apply, RankStep.apply_fast):
            return None
        kept = list(range(len(cands)))
        if self.constant:
            return FastOutcome(kept, remark=self.remark(ctx, cands))
        key = self.key
        keys = [key(ctx, cand) for cand in cands]
        return FastOutcome(kept, keys=keys, remark=self.remark(ctx, cands))

    def note(self, ctx: RouteContext, cand: Candidate) -> StepNote:
        """A score note."""
        result = self.score(ctx, cand)
        return StepNote(self.name, "score", result.detail, result.key)

    def apply(self, ctx: RouteContext, entries: list[Entry]) -> StepOutcome:
        """Append each entry's score as its next sort key."""
        for entry in entries:
            result = self.score(ctx, entry.candidate)
            entry.keys.append(result.key)
            entry.notes.append(StepNote(self.name, "score", result.detail, result.key))
        return StepOutcome(kept=entries, remark=self.remark(ctx, [e.candidate for e in entries]))


def _own(step: Step, apply: object, apply_fast: object) -> bool:
    """Does ``step``'s class replace the base's ``apply`` without its own ``apply_fast``?"""
    cls = type(step)
    return cls.apply is not apply and cls.apply_fast is apply_fast


def run_filter(
    name: str,
    on_empty: OnEmpty,
    entries: list[Entry],
    check: Callable[[Candidate], Check],
) -> StepOutcome:
    """Shared filter logic: note verdicts, split kept/dropped, rescue if asked to."""
    kept: list[Entry] = []
    dropped: list[tuple[Entry, Check]] = []
    for entry in entries:
        verdict = check(entry.candidate)
        entry.notes.append(StepNote(name, "pass" if verdict.ok else "drop", verdict.detail))
        if verdict.ok:
            kept.append(entry)
        else:
            dropped.append((entry, verdict))
    if kept or not dropped:
        return StepOutcome(kept=kept, dropped=[e for e, _ in dropped])
    if on_empty == "reject":
        return StepOutcome([], [e for e, _ in dropped], f"{name}: no candidate passes")
    best, best_check = min(dropped, key=lambda pair: (pair[1].badness, pair[0].order))
    best.notes[-1] = StepNote(name, "rescued", f"last resort: {best_check.detail}")
    rest = [e for e, _ in dropped if e is not best]
    return StepOutcome([best], rest, f"{name}: none passed, kept {best.candidate.name}")
