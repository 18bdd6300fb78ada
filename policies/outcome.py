"""What a policy returns: candidates in the order to try them, each with its reasons."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple, overload

from pydantic import BaseModel, ConfigDict, Field

from policies.facts import Candidate

Verdict = Literal["pass", "drop", "rescued", "score"]
"""``pass``/``drop``: a filter's verdict; ``rescued``: dropped, then kept as the last resort;
``score``: a ranker's score (lower ranks first)."""

REASON_MAX_CHARS = 200


class Hedge(BaseModel):
    """Hedging as data: if no first token after ``after_ms``, also start the next candidate.

    The dispatcher acts on it (first to answer wins, the other is aborted); policies only
    carry it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    after_ms: float = Field(gt=0)
    max_extra: int = Field(default=1, ge=1)


@dataclass(frozen=True)
class StepNote:
    """One step's word on one candidate."""

    step: str
    verdict: Verdict
    detail: str
    score: float | None = None


class Ranked(NamedTuple):
    """A candidate with the notes every step left on it, in step order. (A named tuple:
    a decision over a large fleet builds one per candidate, and these cost the least.)"""

    candidate: Candidate
    notes: tuple[StepNote, ...]

    @property
    def name(self) -> str:
        """The deployment's name."""
        return self.candidate.name

    def summary(self) -> str:
        """The scoring and rescue notes, short, for a header."""
        parts = [f"{n.step} {n.detail}" for n in self.notes if n.verdict in ("score", "rescued")]
        return ", ".join(parts)


class RankedOrder(Sequence[Ranked]):
    """Ranked candidates built as they are read: ``head`` (the noted ones), then
    ``candidates[i]`` for each ``i`` of ``order`` after it, without notes. A request over
    a large fleet reads the head (the chosen one, a fallback or two), so the rest is
    never built."""

    __slots__ = ("_candidates", "_head", "_order")

    def __init__(
        self, head: tuple[Ranked, ...], candidates: Sequence[Candidate], order: Sequence[int]
    ) -> None:
        self._head = head
        self._candidates = candidates
        self._order = order

    def __len__(self) -> int:
        return len(self._order)

    @overload
    def __getitem__(self, index: int) -> Ranked: ...

    @overload
    def __getitem__(self, index: slice) -> RankedOrder: ...

    def __getitem__(self, index: int | slice) -> Ranked | RankedOrder:
        if isinstance(index, slice):  # lazy too: a dispatcher takes "the rest" at each try
            at = range(*index.indices(len(self._order)))
            if at.step != 1:
                picked = [self._order[i] for i in at]
                return RankedOrder(tuple(self[i] for i in at), self._candidates, picked)
            head, order = self._head[at.start : at.stop], self._order[at.start : at.stop]
            return RankedOrder(head, self._candidates, order)
        if index < 0:
            index += len(self._order)
        if index < len(self._head):
            return self._head[index]
        return Ranked(self._candidates[self._order[index]], ())  # IndexError past the end

    def names(self) -> list[str]:
        """The deployment names in order (no :class:`Ranked` built)."""
        candidates = self._candidates
        return [candidates[i].facts.name for i in self._order]


@dataclass(frozen=True)
class ExplainRow:
    """One line of an explain view: position (``None`` if dropped), candidate, step, verdict."""

    position: int | None
    candidate: str
    step: str
    verdict: Verdict
    detail: str


@dataclass(frozen=True)
class Decision:
    """The outcome of routing one request.

    ``ranked`` is the order to try (best first; the dispatcher falls back along it);
    ``dropped`` holds the candidates filters removed, with the reasons; ``remarks`` are
    policy-level notes such as "no candidate predicted to meet the SLO".
    """

    ranked: Sequence[Ranked]
    dropped: tuple[Ranked, ...]
    remarks: tuple[str, ...] = ()
    hedge: Hedge | None = None

    @property
    def chosen(self) -> Ranked | None:
        """The first candidate to try, or ``None`` when every candidate was filtered out."""
        return self.ranked[0] if self.ranked else None

    @property
    def names(self) -> list[str]:
        """Deployment names in the order to try them."""
        ranked = self.ranked
        if isinstance(ranked, RankedOrder):
            return ranked.names()
        return [r.candidate.facts.name for r in ranked]

    def reason(self, max_chars: int = REASON_MAX_CHARS) -> str:
        """A one-line, ASCII reason, fit for an ``x-shunter-route`` header."""
        chosen = self.chosen
        if chosen is None:
            text = "no candidate: " + "; ".join(self.remarks or ("all filtered out",))
        else:
            text = chosen.name
            summary = chosen.summary()
            if summary:
                text += f" by {summary}"
            if self.dropped:
                text += f"; {len(self.dropped)} dropped"
            if self.remarks:
                text += "; " + "; ".join(self.remarks)
        text = text.encode("ascii", "replace").decode("ascii")
        return text if len(text) <= max_chars else text[: max_chars - 3] + "..."

    def rows(self) -> list[ExplainRow]:
        """Every candidate's every note, ranked ones first, for an explain table."""
        out: list[ExplainRow] = []
        for position, item in enumerate(self.ranked, start=1):
            out.extend(_rows(position, item))
        for item in self.dropped:
            out.extend(_rows(None, item))
        return out

    def explain(self) -> str:
        """A plain-text explain view: one line per note, then the remarks."""
        lines = []
        for row in self.rows():
            pos = "-" if row.position is None else str(row.position)
            lines.append(
                f"{pos:>2} {row.candidate:<24} {row.step:<14} {row.verdict:<8} {row.detail}"
            )
        lines.extend(f"   note: {remark}" for remark in self.remarks)
        return "\n".join(lines)


def _rows(position: int | None, item: Ranked) -> list[ExplainRow]:
    return [ExplainRow(position, item.name, n.step, n.verdict, n.detail) for n in item.notes]
