"""What the memory planner needs to know about a model, whatever file it came from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

KV_DTYPE_BYTES: Mapping[str, float] = MappingProxyType(
    {
        "f32": 4.0,
        "f16": 2.0,
        "bf16": 2.0,
        "q8_0": 34 / 32,
        "q5_1": 24 / 32,
        "q5_0": 22 / 32,
        "q4_1": 20 / 32,
        "q4_0": 18 / 32,
        "iq4_nl": 18 / 32,
        "fp8": 1.0,
        "fp8_e4m3": 1.0,
        "fp8_e5m2": 1.0,
    }
)
"""Bytes per cached K or V element. Block-quantized types (llama.cpp ``-ctk/-ctv``) include
their per-block scale: q8_0 stores 32 values in 34 bytes, q4_0 in 18. ``fp8`` is vLLM's
``kv_cache_dtype``. Aliases: ``float16``/``half``/``auto`` → f16, ``bfloat16`` → bf16."""

_ALIASES: Mapping[str, str] = MappingProxyType(
    {"float16": "f16", "half": "f16", "auto": "f16", "bfloat16": "bf16", "float32": "f32"}
)


def kv_dtype_bytes(dtype: str) -> float:
    """Bytes per K/V element for a KV-cache dtype name; ``ValueError`` if unknown."""
    key = dtype.lower()
    key = _ALIASES.get(key, key)
    if key not in KV_DTYPE_BYTES:
        known = ", ".join(sorted(KV_DTYPE_BYTES))
        raise ValueError(f"unknown kv dtype {dtype!r} (known: {known})")
    return KV_DTYPE_BYTES[key]


@dataclass(frozen=True)
class ModelShape:
    """Layer count, attention shape and weight sizes of one model.

    ``kv_heads`` and ``layer_bytes`` have one entry per repeating block (layer); a layer
    with 0 KV heads (recurrent or attention-free) caches nothing. ``other_bytes`` is the
    weight outside the blocks: embeddings, output head, final norm.
    """

    name: str
    n_layers: int
    kv_heads: tuple[int, ...]
    key_length: int
    value_length: int
    layer_bytes: tuple[int, ...]
    other_bytes: int
    context_length: int | None = None
    embedding_length: int | None = None
    vocab_size: int | None = None
    source: str = ""
    parameters: int | None = None
    """Every weight, counted once (tied embeddings once); ``None`` when not known."""
    active_parameters: int | None = None
    """For a mixture of experts: the weights one token uses (the routed experts' share of
    the expert weights, plus everything else); ``None`` for a dense model."""

    def __post_init__(self) -> None:
        if len(self.kv_heads) != self.n_layers or len(self.layer_bytes) != self.n_layers:
            raise ValueError(f"{self.name}: per-layer figures must have {self.n_layers} entries")

    @property
    def weights_bytes(self) -> int:
        """All weights: the blocks plus everything else."""
        return sum(self.layer_bytes) + self.other_bytes

    def layer_kv_bytes_per_token(
        self, layer: int, kv_dtype: str = "f16", v_dtype: str | None = None
    ) -> float:
        """KV bytes one token costs in one layer: kv_heads x (dk x K bytes + dv x V bytes)."""
        k_bytes = kv_dtype_bytes(kv_dtype)
        v_bytes = kv_dtype_bytes(v_dtype) if v_dtype else k_bytes
        return self.kv_heads[layer] * (self.key_length * k_bytes + self.value_length * v_bytes)

    def kv_bytes_per_token(self, kv_dtype: str = "f16", v_dtype: str | None = None) -> float:
        """KV bytes one token costs across all layers (the KV-cache formula, per token)."""
        return sum(
            self.layer_kv_bytes_per_token(i, kv_dtype, v_dtype) for i in range(self.n_layers)
        )
