"""Which idle local models to unload so that another fits under the memory budget."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class CannotFitError(RuntimeError):
    """Not enough memory can be freed for a model under the budget."""


@dataclass(frozen=True)
class LoadedModel:
    """A model in memory, as eviction sees it; ``busy`` ones (requests in flight) stay."""

    name: str
    size_bytes: int
    last_used: float
    busy: bool = False


def choose_evictions(
    loaded: Sequence[LoadedModel], need_bytes: int, budget_bytes: int
) -> list[str]:
    """The least-recently-used idle models to unload, oldest first, so that ``need_bytes``
    more fit under ``budget_bytes`` (empty when they already fit). Raises
    :class:`CannotFitError` when unloading every idle model is not enough."""
    if need_bytes > budget_bytes:
        raise CannotFitError(f"{need_bytes} bytes needed, more than the {budget_bytes} budget")
    free = budget_bytes - sum(m.size_bytes for m in loaded)
    victims: list[str] = []
    for model in sorted((m for m in loaded if not m.busy), key=lambda m: (m.last_used, m.name)):
        if need_bytes <= free:
            break
        victims.append(model.name)
        free += model.size_bytes
    if need_bytes > free:
        busy = sum(m.size_bytes for m in loaded if m.busy)
        raise CannotFitError(f"{need_bytes} bytes needed, {free} free at most, {busy} busy")
    return victims
