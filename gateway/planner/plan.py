"""Place a model on a device: weights + KV cache + runtime overhead → a fit class.

* ``fits``: weights, KV for ``context x slots`` and overhead all fit.
* ``kv_spills``: weights and overhead fit, but not the requested KV; the plan says how many
  slots fit at the requested context (``max_slots``) and what context fits with the
  requested slots (``max_context``). At least ``MIN_CONTEXT`` tokens of KV must fit.
* ``partial_offload``: the weights do not fit; ``gpu_layers`` blocks (each with its
  weights and its KV) fit on the device, the rest run from host RAM (llama.cpp
  ``-ngl``). Only for devices/engines that can offload (CUDA by default); embeddings and
  the output head are counted on the host.
* ``does_not_fit``: not even one block fits, offload is not possible, or the host cannot
  hold the offloaded rest.

Runtime overhead, when not given: a base per device kind (CUDA context and library
workspaces ~512 MiB; Metal and CPU 256 MiB) plus one micro-batch of f32 compute buffers,
``UBATCH x (vocab + 4 x embedding) x 4`` bytes (logits dominate; llama.cpp's default
n_ubatch is 512), or 2% of the weights when the vocabulary is unknown. It is an
estimate: engines that capture CUDA graphs or batch more tokens per step use more.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from gateway.planner.devices import Device, DeviceKind, gib
from gateway.planner.shape import ModelShape
from policies.facts import FitClass

MIB = 1 << 20
UBATCH = 512
MIN_CONTEXT = 512
DEFAULT_CONTEXT = 4096
BASE_OVERHEAD: Mapping[DeviceKind, int] = MappingProxyType(
    {"cuda": 512 * MIB, "metal": 256 * MIB, "cpu": 256 * MIB}
)


@dataclass(frozen=True)
class MemoryPlan:
    """How one model, at one context and slot count, fits one device."""

    model: str
    device: str
    fit: FitClass
    context: int
    slots: int
    kv_dtype: str
    weights_bytes: int
    kv_bytes_per_token: float
    kv_bytes: int
    overhead_bytes: int
    available_bytes: int
    n_layers: int
    gpu_layers: int
    max_slots: int | None = None
    max_context: int | None = None
    detail: str = ""

    @property
    def required_bytes(self) -> int:
        """Everything on one device: weights + KV + overhead."""
        return self.weights_bytes + self.kv_bytes + self.overhead_bytes


def estimate_overhead(model: ModelShape, kind: DeviceKind) -> int:
    """Runtime overhead in bytes (see the module docstring)."""
    base = BASE_OVERHEAD[kind]
    if model.vocab_size and model.embedding_length:
        return base + UBATCH * (model.vocab_size + 4 * model.embedding_length) * 4
    return base + model.weights_bytes // 50


def plan_memory(
    model: ModelShape,
    device: Device,
    *,
    context: int | None = None,
    slots: int = 1,
    kv_dtype: str = "f16",
    v_dtype: str | None = None,
    usable_fraction: float = 1.0,
    overhead_bytes: int | None = None,
    allow_offload: bool | None = None,
    host_bytes: int | None = None,
) -> MemoryPlan:
    """Plan ``model`` on ``device`` for ``slots`` parallel sequences of ``context`` tokens.

    ``context`` defaults to the model's trained context (else 4096). ``usable_fraction``
    caps the device share (vLLM's ``gpu_memory_utilization``). ``allow_offload`` defaults
    to True for CUDA devices (llama.cpp can run blocks from host RAM); ``host_bytes``, when
    given, must hold the offloaded blocks.
    """
    if slots < 1:
        raise ValueError("slots must be >= 1")
    ctx = context or model.context_length or DEFAULT_CONTEXT
    per_token = model.kv_bytes_per_token(kv_dtype, v_dtype)
    overhead = estimate_overhead(model, device.kind) if overhead_bytes is None else overhead_bytes
    plan = MemoryPlan(
        model=model.name,
        device=device.name,
        fit="fits",
        context=ctx,
        slots=slots,
        kv_dtype=kv_dtype if v_dtype is None else f"{kv_dtype}/{v_dtype}",
        weights_bytes=model.weights_bytes,
        kv_bytes_per_token=per_token,
        kv_bytes=math.ceil(per_token * ctx * slots),
        overhead_bytes=overhead,
        available_bytes=int(device.memory_bytes * usable_fraction),
        n_layers=model.n_layers,
        gpu_layers=model.n_layers,
    )
    if plan.required_bytes <= plan.available_bytes:
        return _with(plan, "fits", detail=f"uses {gib(plan.required_bytes)} of {_gib_avail(plan)}")
    free_for_kv = plan.available_bytes - plan.weights_bytes - overhead
    if per_token and free_for_kv >= per_token * min(ctx, MIN_CONTEXT):
        return _kv_spills(plan, free_for_kv)
    offload = device.kind == "cuda" if allow_offload is None else allow_offload
    if not offload:
        return _with(plan, "does_not_fit", gpu_layers=0, detail=_short(plan, "no offload"))
    return _offload(plan, model, v_dtype, host_bytes)


def _kv_spills(plan: MemoryPlan, free_for_kv: int) -> MemoryPlan:
    per_token = plan.kv_bytes_per_token
    max_slots = int(free_for_kv // (per_token * plan.context))
    max_context = int(free_for_kv // (per_token * plan.slots))
    if max_slots >= 1:
        detail = f"KV for {max_slots} slot(s) at ctx {plan.context}, or ctx {max_context}"
    else:
        detail = f"ctx {max_context} per slot at {plan.slots} slot(s)"
    return _with(plan, "kv_spills", max_slots=max_slots, max_context=max_context, detail=detail)


def _offload(
    plan: MemoryPlan, model: ModelShape, v_dtype: str | None, host_bytes: int | None
) -> MemoryPlan:
    budget = plan.available_bytes - plan.overhead_bytes
    tokens = plan.context * plan.slots
    kv_dtype = plan.kv_dtype.split("/")[0]
    layers, used = 0, 0
    for i in reversed(range(model.n_layers)):  # llama.cpp offloads the last blocks first
        cost = model.layer_bytes[i] + model.layer_kv_bytes_per_token(i, kv_dtype, v_dtype) * tokens
        if used + cost > budget:
            break
        layers, used = layers + 1, int(used + cost)
    on_host = plan.weights_bytes - sum(model.layer_bytes[model.n_layers - layers :])
    if layers == 0:
        return _with(plan, "does_not_fit", gpu_layers=0, detail=_short(plan, "not one block fits"))
    if host_bytes is not None and on_host > host_bytes:
        detail = f"{layers}/{model.n_layers} blocks fit; host lacks {gib(on_host - host_bytes)}"
        return _with(plan, "does_not_fit", gpu_layers=layers, detail=detail)
    detail = f"{layers}/{model.n_layers} blocks on device, {gib(on_host)} weights on host"
    return _with(plan, "partial_offload", gpu_layers=layers, detail=detail)


def _with(
    plan: MemoryPlan,
    fit: FitClass,
    *,
    detail: str,
    gpu_layers: int | None = None,
    max_slots: int | None = None,
    max_context: int | None = None,
) -> MemoryPlan:
    layers = plan.gpu_layers if gpu_layers is None else gpu_layers
    return replace(
        plan,
        fit=fit,
        detail=detail,
        gpu_layers=layers,
        max_slots=max_slots,
        max_context=max_context,
    )


def _short(plan: MemoryPlan, why: str) -> str:
    return f"needs {gib(plan.required_bytes)} of {_gib_avail(plan)}: {why}"


def _gib_avail(plan: MemoryPlan) -> str:
    return gib(plan.available_bytes)
