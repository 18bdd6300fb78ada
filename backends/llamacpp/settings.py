"""How a llama.cpp deployment is configured (:class:`LlamaCppSettings`, the ``llamacpp``
entry of a config's deployments), its memory plan, and finding its GGUF."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from backends.base import DeploymentSettings
from backends.llamacpp.embed import Pooling
from backends.llamacpp.tool_parsers import ParserName
from gateway.common.durations import UNIT_SECONDS, split_duration
from gateway.planner import (
    Device,
    MemoryPlan,
    ModelSize,
    discover_devices,
    plan_memory,
    shape_from_gguf,
    size_of_shape,
)


def _gguf_path(model: str) -> Path:
    """:func:`gateway.models.store.resolve_model_path`, the store loaded with the first
    llama.cpp deployment that reads a model file."""
    from gateway.models.store import resolve_model_path

    return resolve_model_path(model)


def _seconds(value: Any) -> Any:
    """A duration as seconds: a number, or a string such as ``500ms``, ``30s``, ``5m``, ``1h``."""
    if isinstance(value, bool):
        raise ValueError("give a duration (seconds, or e.g. 30s, 5m, 1h), not true/false")
    if not isinstance(value, str):
        return value
    parsed = split_duration(value)
    if parsed is None:
        raise ValueError(f"{value!r} is not a duration: give seconds, or e.g. 30s, 5m, 1h")
    number, unit = parsed
    return number * UNIT_SECONDS[unit or "s"]


Seconds = Annotated[float, BeforeValidator(_seconds), Field(ge=0)]


@dataclass(frozen=True)
class BatchSettings:
    """What the continuous-batching scheduler (:mod:`~backends.llamacpp.batch`) runs with."""

    parallel: int
    n_ctx_per_slot: int
    n_batch: int = 512
    threads: int = 1
    kv_cache_type: str = "f16"
    flash_attn: bool | Literal["auto"] = "auto"
    prefix_cache: bool = True


class LlamaCppSettings(DeploymentSettings):
    """A GGUF model served in this process. ``model`` is a model-cache name (what
    ``shunter pull`` stored), a path, or ``demo:tiny`` / ``demo:bench`` for a generated
    random-weight model kept in the model cache.

    All ``parallel`` sequences decode together in one llama.cpp context of
    ``parallel * n_ctx`` tokens (continuous batching, see ``backends/llamacpp/batch.py``).
    """

    backend: Literal["llamacpp"]
    n_ctx: int = Field(default=4096, ge=64, description="context length per slot")
    parallel: int = Field(default=1, ge=1, le=64, description="concurrent sequences")
    threads: int | None = Field(default=None, ge=1, description="default: every CPU core")
    gpu_layers: Annotated[int, Field(ge=-1)] | Literal["auto"] = Field(
        default=0, description="-1 offloads every layer; auto: as many as the memory plan fits"
    )
    kv_cache_type: Literal["f16", "q8_0"] = "f16"
    flash_attn: bool | Literal["auto"] = Field(
        default="auto", description="auto: on where the device supports it (llama.cpp's default)"
    )
    n_batch: int = Field(default=512, ge=8, description="tokens per decode step (prefill chunk)")
    prefix_cache: bool = Field(default=True, description="reuse KV of shared prompt prefixes")
    max_queue: int = Field(default=64, ge=0, description="requests waiting for a slot")
    default_max_tokens: int = Field(default=512, ge=1)
    chat_template: str | None = None
    tool_call_parser: ParserName | None = Field(
        default=None,
        description=(
            "how tool calls are read from the output with tool_choice auto: hermes, "
            "llama3_json or mistral; default: the convention the chat template shows "
            "(hermes when it shows none)"
        ),
    )
    task: Literal["generate", "embed"] = Field(
        default="generate",
        description="embed: serve /v1/embeddings from an embedding model (pooled, normalised)",
    )
    pooling: Pooling = Field(default="mean", description="how task: embed pools token vectors")
    preload: bool = Field(default=True, description="load at gateway start; false: on first use")
    keep_alive: Seconds | None = Field(
        default=None, description="unload after this long idle (seconds or 30s/5m/1h); none: never"
    )
    stall_timeout_s: Annotated[Seconds, Field(gt=0)] | None = Field(
        default=60.0,
        description=(
            "with work pending and no decode step done for this long, the engine is stalled: "
            "its requests fail with 503 engine_stalled and readiness turns 503 until it moves "
            "again; keep it above the longest decode step (an n_batch prefill chunk); none: off"
        ),
    )

    kv_move_max_mb: int = Field(
        default=2048,
        ge=1,
        description=(
            "the largest KV state of one sequence it imports, in MiB (never more than a "
            "full sequence takes here); a larger one is refused with 413 before it is read"
        ),
    )
    kv_move_timeout_s: Annotated[Seconds, Field(gt=0)] = Field(
        default=300.0,
        description="time for a KV state to arrive whole (import) or be sent (export)",
    )

    @model_validator(mode="after")
    def _quantized_kv_needs_flash_attn(self) -> LlamaCppSettings:
        if self.kv_cache_type != "f16" and self.flash_attn is False:
            raise ValueError("kv_cache_type q8_0 needs flash_attn (llama.cpp's V cache)")
        return self

    def memory_plan(self, devices: Mapping[str, Device]) -> MemoryPlan | str:
        device = self._device(devices)
        if device is None:
            return f"device {self.device!r} not found"
        try:
            shape = shape_from_gguf(_gguf_path(self.model))
        except (OSError, ValueError) as exc:
            return f"cannot read model: {exc}"
        embed = self.task == "embed"  # one sequence at a time, f16 KV (embed.py)
        return plan_memory(
            shape,
            device,
            context=self.n_ctx,
            slots=1 if embed else self.parallel,
            kv_dtype="f16" if embed else self.kv_cache_type,
            allow_offload=self.gpu_layers != 0 and device.kind != "cpu",
        )

    def file_size(self) -> ModelSize | None:
        """The parameters the GGUF's tensors hold (reads its header only)."""
        return size_of_shape(shape_from_gguf(_gguf_path(self.model)))

    def reports_held_prefixes(self) -> bool:
        return self.task == "generate" and self.prefix_cache

    def returns_logprobs(self) -> bool:
        """Text generation computes them from the raw logits when asked."""
        return self.task == "generate"

    def kv_move_limits(self) -> tuple[int, float] | None:
        """A text-generation engine moves its sequences' KV: its bounds (bytes, seconds)."""
        if self.task != "generate":
            return None
        return self.kv_move_max_mb << 20, self.kv_move_timeout_s

    def _device(self, devices: Mapping[str, Device]) -> Device | None:
        """The named device; without a name host RAM when no layer is offloaded, else the
        first GPU found (then host RAM)."""
        if self.device is not None:
            return devices.get(self.device)
        wanted = ("cpu",) if self.gpu_layers == 0 else ("cuda", "metal", "cpu")
        for kind in wanted:
            for device in devices.values():
                if device.kind == kind:
                    return device
        return None

    def batch_settings(self) -> BatchSettings:
        return BatchSettings(
            parallel=self.parallel,
            n_ctx_per_slot=self.n_ctx,
            n_batch=self.n_batch,
            threads=self.threads or os.cpu_count() or 1,
            kv_cache_type=self.kv_cache_type,
            flash_attn=self.flash_attn,
            prefix_cache=self.prefix_cache,
        )


async def find_model(settings: LlamaCppSettings) -> Path:
    """The deployment's GGUF (see :func:`gateway.models.store.resolve_model_path`); a
    missing one names it."""
    try:
        return await asyncio.to_thread(_gguf_path, settings.model)
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"deployment {settings.name!r}: {exc}") from None


def auto_gpu_layers(settings: LlamaCppSettings) -> int:
    """``gpu_layers: auto``: every layer when the memory plan fits the GPU (or only the KV
    spills), the planner's layer count on partial offload, none without a GPU."""
    plan = settings.memory_plan({d.name: d for d in discover_devices()})
    if isinstance(plan, str) or plan.device == "cpu" or plan.fit == "does_not_fit":
        return 0
    return -1 if plan.fit in ("fits", "kv_spills") else plan.gpu_layers
