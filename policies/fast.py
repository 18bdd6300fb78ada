"""The routing fast path: the decision :meth:`Policy.route` makes, without writing every
candidate's every note.

A request needs the order to try deployments in, the dropped ones, the remarks, and the
notes of the first two candidates (the reason header names the chosen one's scores; the
deciding-step label compares it with the runner-up). With hundreds of deployments, writing
a note with a formatted detail for each candidate at each step cost most of the routing
time, so here filters give verdicts and rankers keys, and notes are written afterwards for
the first two only. The explain view (``shunter route``) keeps the full path.

Over a :class:`~policies.pool.Pool`, a filter that reads only a few facts is asked about
one candidate of each kind (:meth:`~policies.steps.FilterStep.apply_by_kind`) instead of
each candidate: with the pool held between requests, filtering a fleet of deployments
of a handful of kinds costs about as much as filtering one.
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.facts import Candidate, RequestFacts
from policies.outcome import Decision, Hedge, Ranked, RankedOrder, StepNote
from policies.pool import Pool
from policies.steps import FastOutcome, FilterStep, RouteContext, Step

NOTED = 2
"""How many of the ranked candidates get their notes: the chosen one and the runner-up."""


def route_fast(
    steps: Sequence[Step],
    hedge: Hedge | None,
    request: RequestFacts,
    candidates: Sequence[Candidate],
    now: float,
) -> Decision | None:
    """The full path's decision with notes on the first :data:`NOTED` ranked candidates
    only, or ``None`` where the fast path does not apply (a step without a fast form, no
    candidate, or one survivor with others dropped, whose notes the caller reads)."""
    if not candidates:
        return None
    ctx = RouteContext(request, now)
    alive = list(range(len(candidates)))
    cands = list(candidates)
    dropped: list[int] = []
    remarks: list[str] = []
    columns: list[dict[int, float]] = []
    special: dict[tuple[int, int], StepNote] = {}
    for index, step in enumerate(steps):
        if not alive:
            break
        out = _by_kind(step, ctx, candidates, alive) or step.apply_fast(ctx, cands)
        if out is None:
            return None
        if out.keys is not None:
            columns.append(dict(zip(alive, out.keys, strict=True)))
        for position, note in out.special.items():
            special[alive[position], index] = note
        if out.remark:
            remarks.append(out.remark)
        dropped.extend(alive[p] for p in out.dropped)
        if len(out.kept) != len(alive):
            alive = [alive[p] for p in out.kept]
            cands = [cands[p] for p in out.kept]
    if not alive or (len(alive) == 1 and dropped):
        return None
    order = _order(alive, columns)

    def noted(i: int) -> Ranked:
        cand = candidates[i]
        notes = tuple(
            special.get((i, index)) or step.note(ctx, cand) for index, step in enumerate(steps)
        )
        return Ranked(cand, notes)

    return Decision(
        ranked=RankedOrder(tuple(noted(i) for i in order[:NOTED]), candidates, order),
        dropped=tuple(Ranked(candidates[i], ()) for i in dropped),
        remarks=tuple(remarks),
        hedge=hedge,
    )


def _by_kind(
    step: Step, ctx: RouteContext, candidates: Sequence[Candidate], alive: list[int]
) -> FastOutcome | None:
    """The step's verdicts one per kind, where the candidates are a pool and the step a
    filter that reads only their kinds (else ``None``: the step asks each candidate)."""
    if not isinstance(candidates, Pool) or not isinstance(step, FilterStep):
        return None
    kind_of = step.kind_of
    if kind_of is None:
        return None
    return step.apply_by_kind(ctx, candidates.kinds(kind_of), alive)


def _order(alive: list[int], columns: list[dict[int, float]]) -> list[int]:
    """Survivors by their keys in step order; ``alive`` is in config order and the sort
    is stable, so equal keys keep the config order, as on the full path. One stable sort
    per key, the last step's first, orders as one sort on the tuple of keys would, without
    building a tuple per survivor."""
    order = list(alive)
    for column in reversed(columns):
        order.sort(key=column.__getitem__)
    return order
