"""Rankers: ``cheapest``, ``fastest``, ``least_loaded``, ``weighted``, ``affinity``, ``first``.

Each gives a score, lower first (see :mod:`policies.steps` for how rankers compose).
Candidates a ranker cannot score (no price, no figures) get ``inf`` and sort last for it.
The ``slo`` ranker lives in :mod:`policies.slo`, ``cached_prefix`` in :mod:`policies.cached`.
"""

from __future__ import annotations

import hashlib
import math
from typing import Literal

from pydantic import BaseModel, ConfigDict

from policies.facts import Candidate
from policies.predict import (
    estimate_cost_usd,
    predict_total_ms,
    predict_tpot_ms,
    predict_ttft_ms,
)
from policies.steps import NoArgs, RankStep, RouteContext, Score


def rendezvous_unit(key: str, name: str) -> float:
    """A stable pseudo-random number in (0, 1) for a (key, candidate) pair.

    Rendezvous (highest-random-weight) hashing ranks candidates by this number: adding or
    removing one candidate moves only the keys that candidate wins or held.
    """
    digest = hashlib.blake2b(f"{key}\x00{name}".encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big") + 0.5) / 2.0**64


class Cheapest(RankStep):
    """Rank by estimated dollars for this request (unpriced deployments last)."""

    name = "cheapest"
    args_model = NoArgs

    def __init__(self, args: NoArgs | None = None) -> None:
        self.args = args or NoArgs()

    def key(self, ctx: RouteContext, cand: Candidate) -> float:
        """:meth:`score`'s key alone."""
        cost = estimate_cost_usd(ctx.request, cand)
        return math.inf if cost is None else cost

    def score(self, ctx: RouteContext, cand: Candidate) -> Score:
        """Estimated request cost in dollars."""
        cost = estimate_cost_usd(ctx.request, cand)
        if cost is None:
            return Score(math.inf, "cost unknown")
        return Score(cost, f"${cost:.6f}")


class FastestArgs(BaseModel):
    """``fastest: {by: ttft}``: rank by predicted ``ttft``, ``tpot`` or ``total`` latency."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    by: Literal["ttft", "tpot", "total"] = "total"


class Fastest(RankStep):
    """Rank by predicted latency (see :mod:`policies.predict`); no figures sorts last."""

    name = "fastest"
    args_model = FastestArgs

    def __init__(self, args: FastestArgs | None = None) -> None:
        self.args = args or FastestArgs()

    def score(self, ctx: RouteContext, cand: Candidate) -> Score:
        """Predicted milliseconds for the chosen measure."""
        by = self.args.by
        if by == "ttft":
            value = predict_ttft_ms(ctx.request, cand)
        elif by == "tpot":
            value = predict_tpot_ms(cand)
        else:
            value = predict_total_ms(ctx.request, cand)
        if value is None:
            return Score(math.inf, f"{by} unknown")
        return Score(value, f"{by}~{value:.0f}ms")

    def describe(self) -> str:
        """The step with its measure."""
        return f"{self.name}(by={self.args.by})"


class LeastLoaded(RankStep):
    """Rank by outstanding requests per unit of capacity.

    Load = (in flight + queued) ÷ capacity, capacity being the slot count when reported,
    else ``max_concurrency``, else 1 (a raw count).
    """

    name = "least_loaded"
    args_model = NoArgs

    def __init__(self, args: NoArgs | None = None) -> None:
        self.args = args or NoArgs()

    def score(self, ctx: RouteContext, cand: Candidate) -> Score:
        """Outstanding requests divided by capacity."""
        live = cand.live
        capacity = live.slots_total or cand.facts.max_concurrency or 1
        outstanding = live.in_flight + live.queue_depth
        load = outstanding / capacity
        return Score(load, f"{outstanding}/{capacity}={load:.2f}")


class Weighted(RankStep):
    """Order by a weighted random draw seeded by the request id.

    Weighted rendezvous hashing: score = -weight / ln(u) with ``u`` from the request id
    and deployment name, so each deployment comes first for a share of requests
    proportional to its weight, deterministically per request. Without a request id the
    heaviest comes first.
    """

    name = "weighted"
    args_model = NoArgs
    reads_live = False

    def __init__(self, args: NoArgs | None = None) -> None:
        self.args = args or NoArgs()

    def score(self, ctx: RouteContext, cand: Candidate) -> Score:
        """Negative weighted draw (lower first)."""
        weight = max(cand.facts.weight, 0.0)
        if not ctx.request.request_id:
            return Score(-weight, f"weight {weight:g}")
        if weight == 0.0:
            return Score(0.0, "weight 0")
        u = rendezvous_unit(ctx.request.request_id, cand.name)
        draw = -weight / math.log(u)
        return Score(-draw, f"weight {weight:g} draw {draw:.3f}")


class Affinity(RankStep):
    """Same prefix/session key → same deployment, by rendezvous hashing.

    Stable when candidates come and go: a key moves only if its deployment leaves (or a
    new one wins it). Requests without a key tie, leaving the order to later rankers.
    Put filters and ``slo`` before it so that affinity never pins a key to a sick or
    overloaded deployment.
    """

    name = "affinity"
    args_model = NoArgs
    reads_live = False

    def __init__(self, args: NoArgs | None = None) -> None:
        self.args = args or NoArgs()

    def score(self, ctx: RouteContext, cand: Candidate) -> Score:
        """Negative rendezvous weight of (key, deployment)."""
        key = ctx.request.prefix_key
        if not key:
            return Score(0.0, "no key")
        u = rendezvous_unit(key, cand.name)
        return Score(-u, f"hrw {u:.3f}")


class First(RankStep):
    """Keep the configured candidate order (a ranker that ranks nothing)."""

    name = "first"
    args_model = NoArgs
    reads_live = False
    constant = True

    def __init__(self, args: NoArgs | None = None) -> None:
        self.args = args or NoArgs()

    def score(self, ctx: RouteContext, cand: Candidate) -> Score:
        """Zero for all: config order decides."""
        return Score(0.0, "config order")
