"""Name → primitive: the table a YAML policy is read through.

A primitive is a :class:`~policies.steps.Step` subclass with a ``name`` and a pydantic
``args_model``. To add one, write the class and list it in :func:`builtin_primitives`
(or pass your own mapping to :meth:`policies.policy.Policy.parse`).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from policies.cached import CachedPrefix
from policies.filters import Capable, FitsMemory, Healthy, WithinBudget
from policies.rankers import Affinity, Cheapest, Fastest, First, LeastLoaded, Weighted
from policies.size import Largest, Size, Smallest
from policies.slo import Slo
from policies.steps import Step


@dataclass(frozen=True)
class Primitive:
    """A registered step: its YAML name, its argument model, and how to build it."""

    name: str
    args_model: type[BaseModel]
    build: Callable[[Any], Step]
    summary: str

    @classmethod
    def of(cls, step_class: type[Step]) -> Primitive:
        """Describe a step class (its constructor takes the validated args model)."""
        doc = (step_class.__doc__ or "").strip().splitlines()
        return cls(step_class.name, step_class.args_model, step_class, doc[0] if doc else "")


def builtin_primitives() -> dict[str, Primitive]:
    """The primitives Shunter ships, by name (a fresh dict: safe to extend)."""
    classes: tuple[type[Step], ...] = (
        Healthy,
        Capable,
        FitsMemory,
        WithinBudget,
        Size,
        Slo,
        Cheapest,
        Fastest,
        LeastLoaded,
        Weighted,
        Affinity,
        CachedPrefix,
        Smallest,
        Largest,
        First,
    )
    return {c.name: Primitive.of(c) for c in classes}


def build_step(name: str, raw_args: object, registry: Mapping[str, Primitive]) -> Step:
    """Validate ``raw_args`` with the primitive's model and build the step.

    Raises ``ValueError`` for an unknown name, and lets pydantic's ``ValidationError``
    (itself a ``ValueError``) through for bad arguments.
    """
    primitive = registry.get(name)
    if primitive is None:
        names = [*sorted(registry), "hedge"]
        close = difflib.get_close_matches(name, names, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown primitive {name!r} (known: {', '.join(names)}){hint}")
    args = primitive.args_model.model_validate({} if raw_args is None else raw_args)
    return primitive.build(args)
