"""Memory plans for a config's local deployments: the ``switchyard plan`` table and the
``fits_memory`` routing filter read the same numbers.

A deployment is planned on the device it names (``device: gpu0``), declared in the config's
``devices`` or discovered on this machine; without one, a llama.cpp deployment with no GPU
layers is planned on host RAM and others on the first GPU found. Remote APIs have no plan.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from backends.llamacpp import LlamaCppSettings, resolve_model_path
from backends.registry import DeploymentConfig
from gateway.planner import Device, MemoryPlan, discover_devices, plan_memory, shape_from_gguf


class DeviceSpec(BaseModel):
    """A device declared in the config, to plan for a machine other than this one."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    kind: Literal["cuda", "metal", "cpu"]
    memory_gb: float = Field(gt=0)


@dataclass(frozen=True)
class Placement:
    deployment: str
    plan: MemoryPlan | None
    note: str = ""


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
    if not isinstance(settings, LlamaCppSettings):
        return Placement(settings.name, None, f"{settings.backend}: no local memory to plan")
    device = _device_for(settings, devices)
    if device is None:
        return Placement(settings.name, None, f"device {settings.device!r} not found")
    try:
        shape = shape_from_gguf(resolve_model_path(settings.model))
    except (OSError, ValueError) as exc:
        return Placement(settings.name, None, f"cannot read model: {exc}")
    embed = settings.task == "embed"  # one sequence at a time, f16 KV (llamacpp_embed.py)
    plan = plan_memory(
        shape,
        device,
        context=settings.n_ctx,
        slots=1 if embed else settings.parallel,
        kv_dtype="f16" if embed else settings.kv_cache_type,
        allow_offload=settings.gpu_layers != 0 and device.kind != "cpu",
    )
    return Placement(settings.name, plan)


def _device_for(settings: LlamaCppSettings, devices: dict[str, Device]) -> Device | None:
    if settings.device is not None:
        return devices.get(settings.device)
    wanted = ("cpu",) if settings.gpu_layers == 0 else ("cuda", "metal", "cpu")
    for kind in wanted:
        for device in devices.values():
            if device.kind == kind:
                return device
    return None
