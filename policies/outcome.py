"""What a policy returns: candidates in the order to try them, each with its reasons."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

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


@dataclass(frozen=True)
class Ranked:
    """A candidate with the notes every step left on it, in step order."""

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

    ranked: tuple[Ranked, ...]
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
        return [r.name for r in self.ranked]

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
