"""The policy a model gets when its config names none, chosen from its candidates.

Candidates that can take each other's conversations (the same model, behind the same kind
of deployment, at the same price, each an engine whose KV cache the gateway sees) are
*interchangeable*: the default spreads new conversations over them and keeps each on the
engine holding its history (``cached_prefix``; with a latency target, ``slo`` before it,
so a home predicted to miss the target spills at once). One API may follow them, as their
fallback (or spill target). Candidates that differ in any of
these keep ``first``: a list such as "the local model, then an API" is an order to fail
over in, and stays one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from operator import attrgetter

from policies.policy import DEFAULT_POLICY, Policy

FILTERS: tuple[str, ...] = DEFAULT_POLICY[:-1]
"""The filters both defaults start with."""


@dataclass(frozen=True)
class Sameness:
    """What decides whether one candidate can take another's conversations.

    ``model``: the model file or upstream model; ``kind``: the kind of deployment (its
    backend); ``price``: anything comparable (equal prices, equal values); ``sees_cache``:
    the engine reports which prompt prefixes its KV cache holds (without that, placing by
    prefix has nothing to go on).
    """

    name: str
    model: str
    kind: str
    price: Hashable = None
    sees_cache: bool = True


def default_policy(candidates: Sequence[Sameness], ttft_ms: float | None = None) -> Policy:
    """The default for these candidates, its ``default_note`` saying which and why.

    Interchangeable engines may be followed by one candidate that reports no cache (an
    API): it stays their fallback, ranked after them (and, with ``ttft_ms``, taking what
    they are predicted to answer too late). ``ttft_ms``: a latency target, for
    interchangeable candidates (``first`` ignores it).
    """
    if len(candidates) < 2:
        return Policy.default()
    engines, rest = candidates, candidates[len(candidates) :]
    if len(candidates) > 2 and not candidates[-1].sees_cache:
        engines, rest = candidates[:-1], candidates[-1:]
    differ = _difference(engines)
    if differ is not None:
        return dataclasses.replace(Policy.default(), default_note=f"first: {differ}")
    steps: list[object] = list(FILTERS)
    if ttft_ms is not None:
        steps.append({"slo": {"ttft_ms": ttft_ms}})
    steps.append("cached_prefix")
    note = f"cached_prefix: {len(engines)} interchangeable {engines[0].kind} engines"
    note += "".join(f", then {c.name}" for c in rest)
    return dataclasses.replace(Policy.parse(steps), default_note=note)


def _difference(candidates: Sequence[Sameness]) -> str | None:
    """Why the candidates are not interchangeable (the first difference), or ``None``.
    Deployments are named, not their models: a model may be a file's path."""
    lead = candidates[0]
    for label in ("model", "kind", "price"):
        value = attrgetter(label)
        if any(value(c) != value(lead) for c in candidates[1:]):
            return f"{', '.join(c.name for c in candidates)} differ in {label}"
    blind = [c.name for c in candidates if not c.sees_cache]
    return f"no cache report from {', '.join(blind)}" if blind else None
