"""A policy: an ordered list of steps read from YAML, run over candidates per request.

YAML form (each item a name, or a one-key mapping of name → arguments)::

    policy: [healthy, fits_memory, capable, {slo: {ttft_ms: 500, tpot_ms: 50}}, cheapest]

A ``{hedge: {after_ms: 300}}`` item is not a step: it is carried on the policy (and on
each decision) as data for the dispatcher.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import PlainSerializer, PlainValidator, ValidationError

from policies.facts import Candidate, RequestFacts
from policies.fast import route_fast
from policies.outcome import Decision, Hedge, Ranked
from policies.registry import Primitive, build_step, builtin_primitives
from policies.steps import Entry, RouteContext, Step

DEFAULT_POLICY: tuple[str, ...] = ("healthy", "capable", "fits_memory", "first")
"""Used when a model names no policy: filter, then keep the configured order."""


@dataclass(frozen=True)
class Policy:
    """Configured steps (and optional hedging), ready to route requests.

    ``source`` keeps the list as written, for display and for writing the config back.
    ``default_note``: where the config named no policy, which default this is and why
    (:mod:`policies.defaults`); every decision says it last among its remarks.
    """

    steps: tuple[Step, ...]
    hedge: Hedge | None = None
    source: tuple[object, ...] = ()
    default_note: str | None = None

    @classmethod
    def parse(
        cls,
        raw: Sequence[object] | None,
        *,
        hedge: Hedge | Mapping[str, object] | None = None,
        registry: Mapping[str, Primitive] | None = None,
    ) -> Policy:
        """Build a policy from its YAML list form (``None`` gives :data:`DEFAULT_POLICY`).

        Raises ``ValueError`` naming the step (index and name) on an unknown primitive
        or bad arguments, so config loading can report it with the file position.
        """
        registry = builtin_primitives() if registry is None else registry
        items: Sequence[object] = DEFAULT_POLICY if raw is None else raw
        if isinstance(items, str | bytes) or not isinstance(items, Sequence):
            raise ValueError(f"policy must be a list of steps, got {type(items).__name__}")
        steps: list[Step] = []
        found_hedge = _hedge(hedge)
        for index, item in enumerate(items):
            name, args = _split(index, item)
            try:
                if name == "hedge":
                    found_hedge = Hedge.model_validate({} if args is None else args)
                else:
                    steps.append(build_step(name, args, registry))
            except ValidationError as err:
                raise ValueError(f"policy step {index} ({name}): {_brief(err)}") from None
            except ValueError as err:
                raise ValueError(f"policy step {index} ({name}): {err}") from None
        if not steps:
            raise ValueError("policy has no steps")
        return cls(tuple(steps), found_hedge, tuple(items))

    @classmethod
    def default(cls) -> Policy:
        """The policy used when none is configured."""
        return cls.parse(None)

    def describe(self) -> str:
        """The steps in order, e.g. ``healthy > slo(ttft_ms=500.0) > cheapest``."""
        text = " > ".join(step.describe() for step in self.steps)
        text += f" (hedge after {self.hedge.after_ms:g}ms)" if self.hedge else ""
        return text + (f" (default {self.default_note})" if self.default_note else "")

    @property
    def reads_live(self) -> bool:
        """Whether any step looks at the candidates' live figures."""
        return any(step.reads_live for step in self.steps)

    def route(
        self,
        request: RequestFacts,
        candidates: Sequence[Candidate],
        *,
        now: float = 0.0,
        explain: bool = True,
    ) -> Decision:
        """Run every step and return candidates best-first, with reasons.

        ``now`` is the caller's clock (the one ``cooled_down_until`` uses). Pure: the same
        inputs give the same decision. With ``explain=False`` only the first two ranked
        candidates carry their notes (the order, the dropped, the remarks, the reason and
        the hedge are the same): what serving a request needs, at a fraction of the cost
        with many candidates (:mod:`policies.fast`).
        """
        if not explain:
            fast = route_fast(self.steps, self.hedge, request, candidates, now)
            if fast is not None:
                return self._noted(fast)
        ctx = RouteContext(request, now)
        entries = [Entry(candidate, index) for index, candidate in enumerate(candidates)]
        dropped: list[Entry] = []
        remarks: list[str] = [] if entries else ["no candidates configured"]
        for step in self.steps:
            if not entries:
                break
            outcome = step.apply(ctx, entries)
            entries, dropped = outcome.kept, dropped + outcome.dropped
            if outcome.remark:
                remarks.append(outcome.remark)
        entries.sort(key=lambda e: (tuple(e.keys), e.order))
        return self._noted(
            Decision(
                ranked=tuple(_ranked(e) for e in entries),
                dropped=tuple(_ranked(e) for e in dropped),
                remarks=tuple(remarks),
                hedge=self.hedge,
            )
        )

    def _noted(self, decision: Decision) -> Decision:
        """The decision with the default's remark last (the steps' own come first: a
        header cut to length keeps them)."""
        if self.default_note is None:
            return decision
        return dataclasses.replace(
            decision, remarks=(*decision.remarks, f"default {self.default_note}")
        )


def _ranked(entry: Entry) -> Ranked:
    return Ranked(entry.candidate, tuple(entry.notes))


def _split(index: int, item: object) -> tuple[str, object]:
    if isinstance(item, str):
        return item, None
    if isinstance(item, Mapping) and len(item) == 1:
        ((name, args),) = item.items()
        if isinstance(name, str):
            return name, args
    raise ValueError(f"policy step {index}: expected a name or a one-key mapping, got {item!r}")


def _hedge(hedge: Hedge | Mapping[str, object] | None) -> Hedge | None:
    if hedge is None or isinstance(hedge, Hedge):
        return hedge
    try:
        return Hedge.model_validate(dict(hedge))
    except ValidationError as err:
        raise ValueError(f"hedge: {_brief(err)}") from None


def _brief(err: ValidationError) -> str:
    parts = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        parts.append(f"{loc}: {e['msg']}" if loc else str(e["msg"]))
    return "; ".join(parts)


def coerce_policy(value: object) -> Policy:
    """Accept a :class:`Policy`, ``None`` (the default policy) or the YAML list form."""
    if isinstance(value, Policy):
        return value
    if value is None:
        return Policy.default()
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return Policy.parse(value)
    raise ValueError(f"policy must be a list of steps, got {type(value).__name__}")


PolicyField = Annotated[
    Policy,
    PlainValidator(coerce_policy, json_schema_input_type=list[str | dict[str, Any]]),
    PlainSerializer(lambda policy: list(policy.source), return_type=list[Any]),
]
"""A pydantic field type: ``policy: PolicyField = None`` in a config model validates the
YAML list at load time (errors name the step) and serializes back to the list."""
