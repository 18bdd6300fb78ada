"""Fit classes, offload layer counts and overhead, each computed independently here."""

from __future__ import annotations

import io
import math

import pytest
from rich.console import Console

from gateway.planner import (
    Device,
    MemoryPlan,
    ModelShape,
    estimate_overhead,
    plan_memory,
)
from gateway.planner.render import plan_table

GIB, MIB = 1 << 30, 1 << 20

W8 = 2 * 8_030_261_248  # Llama-3.1-8B in bf16
KV8 = 2 * 32 * 8 * 128 * 2  # bytes per token, f16: K and V x layers x kv heads x head dim x 2
O8 = 512 * MIB + 512 * (128256 + 4 * 4096) * 4  # CUDA base + one micro-batch of f32 buffers

# One Llama-3-70B block: q, k, v, o projections + gated MLP + two norms, in bf16.
ATTN70 = 8192 * 8192 + 2 * 8192 * 1024 + 8192 * 8192
LAYER70 = 2 * (ATTN70 + 3 * 8192 * 28672 + 2 * 8192)
KV70_LAYER = 2 * 8 * 128 * 2  # bytes per token per block, f16
O70 = 512 * MIB + 512 * (128256 + 4 * 8192) * 4

RTX = Device.declared("rtx", "cuda", 24)
H100 = Device.declared("h100", "cuda", 80)


def _layers_that_fit(memory: int, tokens: int, kv_layer: float) -> int:
    return int((memory - O70) // (LAYER70 + kv_layer * tokens))


def test_overhead_estimate(shape8: ModelShape) -> None:
    assert estimate_overhead(shape8, "cuda") == O8
    assert estimate_overhead(shape8, "cpu") == O8 - 256 * MIB


def test_fits(shape8: ModelShape) -> None:
    plan = plan_memory(shape8, RTX, context=8192, slots=4)
    assert plan.fit == "fits"
    assert plan.kv_bytes == KV8 * 8192 * 4 == 4 * GIB
    assert plan.required_bytes == W8 + 4 * GIB + O8
    assert plan.gpu_layers == 32


def test_kv_spills_says_what_fits(shape8: ModelShape) -> None:
    plan = plan_memory(shape8, RTX, context=32768, slots=8)
    free = 24 * GIB - W8 - O8
    assert plan.fit == "kv_spills"
    assert plan.max_slots == free // (KV8 * 32768) == 2
    assert plan.max_context == free // (KV8 * 8)
    assert plan.gpu_layers == 32
    assert "2 slot(s) at ctx 32768" in plan.detail


def test_kv_spills_when_not_one_slot_fits_reports_context(shape8: ModelShape) -> None:
    plan = plan_memory(shape8, Device("small", "cuda", W8 + O8 + KV8 * 2048), context=8192)
    assert plan.fit == "kv_spills"
    assert (plan.max_slots, plan.max_context) == (0, 2048)
    assert plan.detail == "ctx 2048 per slot at 1 slot(s)"


@pytest.mark.parametrize(("device", "expected"), [(H100, 49), (RTX, 14)])
def test_partial_offload_layer_counts(shape70: ModelShape, device: Device, expected: int) -> None:
    assert shape70.layer_bytes[0] == LAYER70
    plan = plan_memory(shape70, device, context=4096, slots=1)
    assert plan.fit == "partial_offload"
    assert plan.gpu_layers == _layers_that_fit(device.memory_bytes, 4096, KV70_LAYER) == expected
    on_host = plan.weights_bytes - expected * LAYER70
    assert f"{expected}/80 blocks on device, {on_host / GIB:.2f} GiB" in plan.detail


def test_kv_dtype_changes_offload_layers(shape70: ModelShape) -> None:
    f16 = plan_memory(shape70, H100, context=32768, slots=4)
    q8 = plan_memory(shape70, H100, context=32768, slots=4, kv_dtype="q8_0")
    tokens = 32768 * 4
    assert f16.gpu_layers == _layers_that_fit(H100.memory_bytes, tokens, KV70_LAYER) == 37
    assert q8.gpu_layers == _layers_that_fit(H100.memory_bytes, tokens, KV70_LAYER * 1.0625 / 2)
    assert q8.gpu_layers > f16.gpu_layers
    assert q8.kv_bytes == math.ceil(f16.kv_bytes * 1.0625 / 2)


def test_kv_dtype_can_turn_spill_into_fit(shape8: ModelShape) -> None:
    device = Device("gpu", "cuda", W8 + O8 + KV8 * 65536 // 2 + MIB)
    assert plan_memory(shape8, device, context=65536).fit == "kv_spills"
    assert plan_memory(shape8, device, context=65536, kv_dtype="fp8").fit == "fits"


def test_does_not_fit_cases(shape70: ModelShape) -> None:
    cpu = plan_memory(shape70, Device.declared("cpu", "cpu", 64), context=4096)
    assert (cpu.fit, cpu.gpu_layers) == ("does_not_fit", 0)
    assert cpu.detail.endswith("no offload")
    metal = plan_memory(shape70, Device.declared("m", "metal", 96), context=4096)
    assert metal.fit == "does_not_fit"
    tiny = plan_memory(shape70, Device.declared("tiny", "cuda", 2), context=4096)
    assert (tiny.fit, tiny.detail.endswith("not one block fits")) == ("does_not_fit", True)
    no_host = plan_memory(shape70, RTX, context=4096, host_bytes=32 * GIB)
    assert (no_host.fit, no_host.gpu_layers) == ("does_not_fit", 14)
    assert "host lacks" in no_host.detail
    enough_host = plan_memory(shape70, RTX, context=4096, host_bytes=128 * GIB)
    assert enough_host.fit == "partial_offload"
    assert plan_memory(shape70, RTX, context=4096, allow_offload=False).fit == "does_not_fit"


def test_usable_fraction_and_overhead_override(shape8: ModelShape) -> None:
    full = plan_memory(shape8, RTX, context=8192, slots=4)
    capped = plan_memory(shape8, RTX, context=8192, slots=4, usable_fraction=0.5)
    assert full.fit == "fits"
    assert capped.available_bytes == 12 * GIB
    assert capped.fit == "partial_offload"
    assert plan_memory(shape8, RTX, context=8192, overhead_bytes=0).overhead_bytes == 0


def test_context_defaults_to_model_and_slots_validated(shape8: ModelShape) -> None:
    assert plan_memory(shape8, H100).context == 131072
    with pytest.raises(ValueError, match="slots"):
        plan_memory(shape8, H100, slots=0)


def test_table_renders_every_plan(shape8: ModelShape, shape70: ModelShape) -> None:
    plans: list[MemoryPlan] = [
        plan_memory(shape8, RTX, context=8192, slots=4),
        plan_memory(shape70, H100, context=4096),
    ]
    out = io.StringIO()
    Console(file=out, width=250, color_system=None).print(plan_table(plans))
    text = out.getvalue()
    for fragment in ("llama-3.1-8b", "fits", "partial_offload", "49/80", "8192 x 4"):
        assert fragment in text
