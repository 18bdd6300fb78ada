"""Memory plans for a config's local deployments: the ``shunter plan`` table and the
``fits_memory`` routing filter read the same numbers.

A deployment is planned on the device it names (``device: gpu0``), declared in the config's
``devices`` or discovered on this machine; each backend's settings say how
(:meth:`backends.base.DeploymentSettings.memory_plan`). Remote APIs have no plan.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from backends.base import DeploymentSettings
from backends.registry import DeploymentConfig
from gateway.config import DeviceSpec
from gateway.planner import Device, MemoryPlan, discover_devices


@dataclass(frozen=True)
class Placement:
    """One deployment's memory plan, or why it has none. ``problem``: it should have one
    (its model is held in this machine's memory) but the model or device cannot be read."""

    deployment: str
    plan: MemoryPlan | None
    note: str = ""
    problem: bool = False


def plan_deployments(
    deployments: Sequence[DeploymentConfig],
    declared: Sequence[DeviceSpec],
    discover: Callable[[], list[Device]] = discover_devices,
) -> list[Placement]:
    """One placement per deployment; ``plan`` is None where there is nothing to plan."""
    devices = {d.name: d for d in discover()}
    devices.update({d.name: Device.declared(d.name, d.kind, d.memory_gb) for d in declared})
    return [_place(d, devices) for d in deployments]


def _place(settings: DeploymentConfig, devices: dict[str, Device]) -> Placement:
    plan = settings.memory_plan(devices)
    if isinstance(plan, str):
        # a backend that plans memory at all overrides memory_plan; then no plan is a fault
        plans_memory = type(settings).memory_plan is not DeploymentSettings.memory_plan
        return Placement(settings.name, None, f"{settings.backend}: {plan}", plans_memory)
    return Placement(settings.name, plan)
