"""The policy of each model whose config names none: chosen from its candidates'
deployments (:func:`policies.defaults.default_policy`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from backends.registry import DeploymentConfig
from policies.defaults import Sameness, default_policy
from policies.policy import Policy


def sameness(settings: DeploymentConfig) -> Sameness:
    """What decides whether this deployment can take another's conversations."""
    price = None if settings.price is None else settings.price.model_dump_json()
    return Sameness(
        name=settings.name,
        model=settings.model,
        kind=settings.backend,
        price=price,
        sees_cache=settings.reports_held_prefixes(),
    )


def default_for(
    candidates: Sequence[str], deployments: Mapping[str, DeploymentConfig], ttft_ms: float | None
) -> Policy | None:
    """The default policy for these candidates, or ``None`` when one of them is unknown
    (the config's checks report it)."""
    if any(name not in deployments for name in candidates):
        return None
    return default_policy([sameness(deployments[name]) for name in candidates], ttft_ms)
