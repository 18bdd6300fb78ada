"""Size steps: the rankers ``smallest`` and ``largest`` and the filter ``size``.

Size is ``CandidateFacts.params_b``, billions of parameters: declared on the deployment or
read from the model's own file (GGUF metadata, a Hugging Face config). A deployment of
unknown size ranks after every known one for both rankers (a guess in either direction
would be wrong half the time), and the decision says so; the ``size`` filter lets it pass
(as ``fits_memory`` passes the unplanned), saying so too.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, model_validator

from policies.facts import Candidate
from policies.steps import (
    Check,
    FilterStep,
    NoArgs,
    RankStep,
    RouteContext,
    Score,
)

UNKNOWN = "size unknown"


def format_params(params_b: float) -> str:
    """Billions of parameters for people: ``0.135B``, ``7B``, ``46.7B``."""
    if params_b < 1:
        return f"{params_b:.3g}B"
    return f"{params_b:.3g}B" if params_b < 100 else f"{params_b:.0f}B"


def describe_size(cand: Candidate) -> str:
    """``7B``, ``46.7B (12.9B active)``, or :data:`UNKNOWN`."""
    facts = cand.facts
    if facts.params_b is None:
        return UNKNOWN
    text = format_params(facts.params_b)
    if facts.active_params_b is not None:
        text += f" ({format_params(facts.active_params_b)} active)"
    return text


class _BySize(RankStep):
    """Shared by ``smallest`` and ``largest``: unknown sizes rank last, and say so."""

    sign = 1.0
    reads_live = False

    def __init__(self, args: NoArgs | None = None) -> None:
        self.args = args or NoArgs()

    def key(self, ctx: RouteContext, cand: Candidate) -> float:
        """:meth:`score`'s key alone."""
        size = cand.facts.params_b
        return math.inf if size is None else self.sign * size

    def remark(self, ctx: RouteContext, cands: list[Candidate]) -> str | None:
        """Names the candidates of unknown size."""
        unknown = [c.name for c in cands if c.facts.params_b is None]
        if unknown:
            return f"{self.name}: {UNKNOWN} for {', '.join(unknown)}, ranked last"
        return None

    def score(self, ctx: RouteContext, cand: Candidate) -> Score:
        """``params_b`` (negated for ``largest``); unknown: ``inf``."""
        size = cand.facts.params_b
        if size is None:
            return Score(math.inf, f"{UNKNOWN} (ranks after known sizes)")
        return Score(self.sign * size, describe_size(cand))


class Smallest(_BySize):
    """Rank by model size, smallest first (unknown sizes last)."""

    name = "smallest"
    args_model = NoArgs


class Largest(_BySize):
    """Rank by model size, largest first (unknown sizes last)."""

    name = "largest"
    args_model = NoArgs
    sign = -1.0


class SizeArgs(BaseModel):
    """``size: {min_b: 1, max_b: 70}``: billions of parameters, either bound optional."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_b: float | None = Field(default=None, ge=0)
    max_b: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one_bound(self) -> SizeArgs:
        if self.min_b is None and self.max_b is None:
            raise ValueError("set min_b or max_b")
        if self.min_b is not None and self.max_b is not None and self.min_b > self.max_b:
            raise ValueError("min_b is above max_b")
        return self


class Size(FilterStep):
    """Keep deployments whose model size lies within bounds (unknown sizes pass)."""

    name = "size"
    args_model = SizeArgs
    reads_live = False

    def __init__(self, args: SizeArgs) -> None:
        self.args = args
        self.kind_of = _params

    def passes(self, ctx: RouteContext, cand: Candidate) -> bool:
        """:meth:`check`'s verdict alone."""
        size = cand.facts.params_b
        if size is None:
            return True
        low, high = self.args.min_b, self.args.max_b
        return not ((low is not None and size < low) or (high is not None and size > high))

    def check(self, ctx: RouteContext, cand: Candidate) -> Check:
        """Compare ``params_b`` with the bounds."""
        size = cand.facts.params_b
        if size is None:
            return Check(True, f"{UNKNOWN} (passes)")
        low, high = self.args.min_b, self.args.max_b
        shown = describe_size(cand)
        if low is not None and size < low:
            return Check(False, f"{shown} < {format_params(low)}")
        if high is not None and size > high:
            return Check(False, f"{shown} > {format_params(high)}")
        return Check(True, shown)

    def describe(self) -> str:
        """The step with its bounds."""
        bounds = self.args.model_dump(exclude_none=True)
        return f"{self.name}(" + ",".join(f"{k}={v:g}" for k, v in bounds.items()) + ")"


def _params(cand: Candidate) -> float | None:
    return cand.facts.params_b
