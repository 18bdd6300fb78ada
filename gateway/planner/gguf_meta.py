"""Read a :class:`ModelShape` from a GGUF file's metadata and tensor table (llama.cpp).

Keys (``a`` = ``general.architecture``): ``a.block_count``, ``a.context_length``,
``a.embedding_length``, ``a.attention.head_count``, ``a.attention.head_count_kv`` (an int
or a per-layer array), ``a.attention.key_length`` / ``value_length`` (default embedding /
heads). Weights are the tensors' ``n_bytes``: ``blk.N.*`` per layer, the rest apart.
Sliding-window layers are counted at full context (an upper bound).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gateway.planner.shape import ModelShape


def shape_from_gguf(path: str | os.PathLike[str]) -> ModelShape:
    """Open a GGUF file (memory-mapped, tensor data not read) and describe the model."""
    from gguf import GGUFReader

    reader = GGUFReader(os.fspath(path), "r")
    return shape_from_reader(reader, default_name=Path(path).name)


def shape_from_reader(reader: Any, default_name: str = "model") -> ModelShape:
    """Describe the model held by an open ``gguf.GGUFReader``."""
    fields = reader.fields
    arch = str(_value(fields, "general.architecture"))
    n_layers = int(_value(fields, f"{arch}.block_count"))
    embd = _optional_int(fields, f"{arch}.embedding_length")
    heads = _per_layer(_value(fields, f"{arch}.attention.head_count"), n_layers)
    kv_raw = _optional(fields, f"{arch}.attention.head_count_kv")
    kv_heads = heads if kv_raw is None else _per_layer(kv_raw, n_layers)
    default_head_dim = (embd // max(heads)) if embd and max(heads) else 0
    key_length = _optional_int(fields, f"{arch}.attention.key_length") or default_head_dim
    value_length = _optional_int(fields, f"{arch}.attention.value_length") or default_head_dim
    layer_bytes, other_bytes = _weights(reader.tensors, n_layers)
    name = _optional(fields, "general.name")
    return ModelShape(
        name=str(name) if name else default_name,
        n_layers=n_layers,
        kv_heads=kv_heads,
        key_length=key_length,
        value_length=value_length,
        layer_bytes=layer_bytes,
        other_bytes=other_bytes,
        context_length=_optional_int(fields, f"{arch}.context_length"),
        embedding_length=embd,
        vocab_size=_vocab_size(fields, arch),
        source="gguf",
    )


def _value(fields: Any, key: str) -> Any:
    value = _optional(fields, key)
    if value is None:
        raise ValueError(f"GGUF metadata lacks {key!r}")
    return value


def _optional(fields: Any, key: str) -> Any:
    field = fields.get(key)
    return None if field is None else field.contents()


def _optional_int(fields: Any, key: str) -> int | None:
    value = _optional(fields, key)
    return None if value is None else int(value)


def _per_layer(value: Any, n_layers: int) -> tuple[int, ...]:
    if isinstance(value, list):
        if len(value) != n_layers:
            raise ValueError(f"per-layer array has {len(value)} entries for {n_layers} layers")
        return tuple(int(v) for v in value)
    return (int(value),) * n_layers


def _weights(tensors: Any, n_layers: int) -> tuple[tuple[int, ...], int]:
    per_layer = [0] * n_layers
    other = 0
    for tensor in tensors:
        parts = str(tensor.name).split(".")
        if len(parts) > 2 and parts[0] == "blk" and parts[1].isdigit():
            per_layer[int(parts[1])] += int(tensor.n_bytes)
        else:
            other += int(tensor.n_bytes)
    return tuple(per_layer), other


def _vocab_size(fields: Any, arch: str) -> int | None:
    size = _optional_int(fields, f"{arch}.vocab_size")
    if size is not None:
        return size
    tokens = fields.get("tokenizer.ggml.tokens")
    return None if tokens is None else len(tokens.data)
