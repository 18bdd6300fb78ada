"""At vLLM's start: why did the engine not come up? (Whether it is installed at all is
:mod:`backends.vllm.install`.)

The known startup failure is memory. vLLM raises one of these (``vllm/v1/worker/utils.py``
and ``vllm/v1/core/kv_cache_utils.py`` in 0.32):

* "Free memory on device (F/T GiB) on startup is less than desired GPU memory
  utilization (U, X GiB)": the share asked for is more than is free;
* "No available memory for the cache blocks" / "... KV cache is needed, which is larger
  than the available KV cache memory": the share is too small for weights + KV.

With the engine core in a child process (the default) the parent only sees
"Engine core initialization failed. See root cause above."; the cause is in vLLM's log.
Either way the error we raise carries the planner's estimate for this deployment
(weights + KV for one ``max_model_len`` sequence + overhead, from the model's
``config.json``) and a suggested ``gpu_memory_utilization``.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backends.vllm.settings import VLLMSettings
from gateway.planner import Device, estimate_overhead, plan_memory, shape_from_hf_config
from gateway.planner.devices import GIB, discover_devices, gib

CUDA_GRAPHS_BYTES = GIB
"""What CUDA graph capture adds to the planner's overhead unless ``enforce_eager``."""

_FREE_SHORT = re.compile(r"Free memory on device.*?\(([\d.]+)/([\d.]+) GiB\) on startup")
_TOO_SMALL = ("No available memory for the cache blocks", "larger than the available KV cache")
_INIT_FAILED = "Engine core initialization failed"


class VLLMUnavailableError(RuntimeError):
    """vLLM is not installed, or not a tested version."""


class VLLMStartError(RuntimeError):
    """The engine did not start; the message says why and what to change."""


@dataclass(frozen=True)
class MemoryAdvice:
    """The planner's view of one deployment on one device, per GPU."""

    device: Device
    weights_bytes: int
    kv_bytes: int
    overhead_bytes: int
    context: int
    utilization: float

    @property
    def required_bytes(self) -> int:
        return self.weights_bytes + self.kv_bytes + self.overhead_bytes

    @property
    def needed_utilization(self) -> float:
        return self.required_bytes / self.device.memory_bytes

    def suggested_utilization(self, free_share: float | None = None) -> float | None:
        """The smallest share (rounded up, 2% headroom) that holds weights + KV; when
        ``free_share`` is known, at most that. ``None`` when nothing fits."""
        wanted = math.ceil((self.needed_utilization + 0.02) * 100) / 100
        ceiling = 0.98 if free_share is None else math.floor((free_share - 0.01) * 100) / 100
        return wanted if wanted <= ceiling else None

    def describe(self) -> str:
        return (
            f"planner estimate per GPU: weights {gib(self.weights_bytes)} + KV for one "
            f"{self.context}-token sequence {gib(self.kv_bytes)} + overhead "
            f"{gib(self.overhead_bytes)} = {gib(self.required_bytes)}, "
            f"{self.needed_utilization:.2f} of {self.device.name} "
            f"({gib(self.device.memory_bytes)})"
        )


def memory_advice(
    settings: VLLMSettings,
    hf_config: Mapping[str, Any],
    device: Device,
    weights_bytes: int | None = None,
) -> MemoryAdvice:
    """Weights + KV for one ``max_model_len`` sequence + overhead, split over
    ``tensor_parallel_size`` GPUs."""
    shape = shape_from_hf_config(hf_config, weights_bytes=weights_bytes)
    kv_dtype = "f16" if settings.kv_cache_dtype == "auto" else settings.kv_cache_dtype
    try:
        plan = plan_memory(
            shape,
            device,
            context=settings.max_model_len,
            kv_dtype=kv_dtype,
            overhead_bytes=0,
            allow_offload=False,
        )
    except ValueError:  # a KV dtype the planner does not know: count it as 16-bit
        plan = plan_memory(
            shape, device, context=settings.max_model_len, overhead_bytes=0, allow_offload=False
        )
    overhead = estimate_overhead(shape, device.kind)
    if not settings.enforce_eager and device.kind == "cuda":
        overhead += CUDA_GRAPHS_BYTES
    tp = settings.tensor_parallel_size
    return MemoryAdvice(
        device=device,
        weights_bytes=plan.weights_bytes // tp,
        kv_bytes=plan.kv_bytes // tp,
        overhead_bytes=overhead,
        context=plan.context,
        utilization=settings.gpu_memory_utilization,
    )


def start_error(
    settings: VLLMSettings, exc: BaseException, device: Device | None = None
) -> VLLMStartError:
    """A clear error for a failed start, with the planner's numbers for memory failures."""
    text = " | ".join(str(e) for e in _chain(exc))
    head = f"deployment {settings.name!r}: vLLM failed to start"
    free = _FREE_SHORT.search(text)
    too_small = any(phrase in text for phrase in _TOO_SMALL)
    opaque = _INIT_FAILED in text
    if not (free or too_small or opaque):
        return VLLMStartError(f"{head}: {exc}")
    advice = _advice_for(settings, device)
    util = settings.gpu_memory_utilization
    if free:
        share = float(free.group(1)) / float(free.group(2))
        fix = f"gpu_memory_utilization {util} asks for more than the free {share:.2f} of the GPU"
        suggested = advice.suggested_utilization(share) if advice else None
        if suggested is None:
            suggested = math.floor((share - 0.01) * 100) / 100
        return VLLMStartError(_join(head, fix, advice, suggested, settings))
    if too_small:
        fix = f"gpu_memory_utilization {util} leaves no room for the KV cache after the weights"
        suggested = advice.suggested_utilization() if advice else None
        return VLLMStartError(_join(head, fix, advice, suggested, settings))
    # the cause is only in vLLM's log; say what the planner thinks of memory
    fix = f"{exc} (the cause is in vLLM's log above)"
    if advice is not None and advice.needed_utilization > util:
        fix += f"; likely memory: gpu_memory_utilization {util} is below the estimate"
        return VLLMStartError(_join(head, fix, advice, advice.suggested_utilization(), settings))
    detail = f"; {advice.describe()}" if advice is not None else ""
    return VLLMStartError(f"{head}: {fix}{detail}")


def _join(
    head: str,
    fix: str,
    advice: MemoryAdvice | None,
    suggested: float | None,
    settings: VLLMSettings,
) -> str:
    parts = [f"{head}: {fix}"]
    if advice is not None:
        parts.append(advice.describe())
    if suggested is not None:
        parts.append(f"suggested gpu_memory_utilization: {suggested:.2f}")
    else:
        parts.append(
            "weights + KV do not fit this GPU: lower max_model_len"
            f"{'' if settings.max_model_len else ' (set it)'}, use kv_cache_dtype fp8, "
            "a quantized model or a larger tensor_parallel_size"
        )
    return "; ".join(parts)


def _advice_for(settings: VLLMSettings, device: Device | None) -> MemoryAdvice | None:
    config = load_hf_config(settings.model)
    device = device or default_device()
    if config is None or device is None:
        return None
    try:
        return memory_advice(settings, config, device, safetensors_bytes(settings.model))
    except (KeyError, ValueError, TypeError, ZeroDivisionError):
        return None


def default_device() -> Device | None:
    """The first CUDA GPU (through NVML, when ``pynvml`` is installed), else host RAM
    (vLLM's CPU backend counts ``gpu_memory_utilization`` against RAM)."""
    devices = discover_devices()
    cuda = [d for d in devices if d.kind == "cuda"]
    found = cuda or devices
    return found[0] if found else None


def load_hf_config(model: str) -> dict[str, Any] | None:
    """``config.json`` from a local model directory or the Hugging Face cache; no download."""
    local = Path(model).expanduser() / "config.json"
    path = local if local.is_file() else _hub_cached(model, "config.json")
    if path is None:
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def safetensors_bytes(model: str) -> int | None:
    """Total size of a local model's ``*.safetensors`` files (the weights), if any."""
    directory = Path(model).expanduser()
    if not directory.is_dir():
        return None
    sizes = [p.stat().st_size for p in directory.glob("*.safetensors")]
    return sum(sizes) or None


def _hub_cached(model: str, filename: str) -> Path | None:
    if importlib.util.find_spec("huggingface_hub") is None:
        return None
    hub = importlib.import_module("huggingface_hub")
    try:
        found = hub.try_to_load_from_cache(model, filename)
    except Exception:
        return None
    return Path(found) if isinstance(found, str) else None


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen
