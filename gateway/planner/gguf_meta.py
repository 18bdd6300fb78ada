"""Read a :class:`ModelShape` from a GGUF file's metadata and tensor table (llama.cpp).

Keys (``a`` = ``general.architecture``): ``a.block_count``, ``a.context_length``,
``a.embedding_length``, ``a.attention.head_count``, ``a.attention.head_count_kv`` (an int
or a per-layer array), ``a.attention.key_length`` / ``value_length`` (default embedding /
heads). Weights are the tensors' ``n_bytes``: ``blk.N.*`` per layer, the rest apart.
Sliding-window layers are counted at full context (an upper bound).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gateway.planner.gguf_header import SkippedList, read_gguf_header
from gateway.planner.shape import ModelShape


def shape_from_gguf(path: str | os.PathLike[str]) -> ModelShape:
    """Read a GGUF file's header (tensor data not read) and describe the model.
    ``ValueError`` when the file is not a GGUF, or lacks tensor data its table lists."""
    header = read_gguf_header(path)
    if header.missing_bytes:
        raise ValueError(
            f"the file is cut short: {header.missing_bytes} bytes of tensor data are missing "
            f"({header.file_size} bytes on disk)"
        )
    tensors = [(t.name, t.n_bytes, t.elements) for t in header.tensors]
    return _shape(header.fields, tensors, default_name=Path(path).name)


def shape_from_reader(reader: Any, default_name: str = "model") -> ModelShape:
    """Describe the model held by an open ``gguf.GGUFReader``."""
    fields = {key: field.contents() for key, field in reader.fields.items()}
    tensors = [(str(t.name), int(t.n_bytes), int(t.n_elements)) for t in reader.tensors]
    return _shape(fields, tensors, default_name)


def _shape(
    fields: Mapping[str, Any], tensors: Sequence[tuple[str, int, int]], default_name: str
) -> ModelShape:
    arch = str(_value(fields, "general.architecture"))
    n_layers = int(_value(fields, f"{arch}.block_count"))
    embd = _optional_int(fields, f"{arch}.embedding_length")
    heads = _per_layer(_value(fields, f"{arch}.attention.head_count"), n_layers)
    kv_raw = fields.get(f"{arch}.attention.head_count_kv")
    kv_heads = heads if kv_raw is None else _per_layer(kv_raw, n_layers)
    default_head_dim = (embd // max(heads)) if embd and max(heads) else 0
    key_length = _optional_int(fields, f"{arch}.attention.key_length") or default_head_dim
    value_length = _optional_int(fields, f"{arch}.attention.value_length") or default_head_dim
    layer_bytes, other_bytes = _weights(((n, b) for n, b, _ in tensors), n_layers)
    parameters, active = _parameters(fields, arch, tensors)
    name = fields.get("general.name")
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
        parameters=parameters,
        active_parameters=active,
    )


def _value(fields: Mapping[str, Any], key: str) -> Any:
    value = fields.get(key)
    if value is None:
        raise ValueError(f"GGUF metadata lacks {key!r}")
    return value


def _optional_int(fields: Mapping[str, Any], key: str) -> int | None:
    value = fields.get(key)
    return None if value is None else int(value)


def _per_layer(value: Any, n_layers: int) -> tuple[int, ...]:
    if isinstance(value, list):
        if len(value) != n_layers:
            raise ValueError(f"per-layer array has {len(value)} entries for {n_layers} layers")
        return tuple(int(v) for v in value)
    return (int(value),) * n_layers


def _weights(tensors: Iterable[tuple[str, int]], n_layers: int) -> tuple[tuple[int, ...], int]:
    per_layer = [0] * n_layers
    other = 0
    for name, n_bytes in tensors:
        parts = name.split(".")
        if len(parts) > 2 and parts[0] == "blk" and parts[1].isdigit():
            per_layer[int(parts[1])] += n_bytes
        else:
            other += n_bytes
    return tuple(per_layer), other


def _parameters(
    fields: Mapping[str, Any], arch: str, tensors: Sequence[tuple[str, int, int]]
) -> tuple[int | None, int | None]:
    """All parameters, and the active ones of a mixture of experts (``None`` if dense)."""
    total = sum(elements for _, _, elements in tensors)
    if not total:
        return None, None
    experts = _optional_int(fields, f"{arch}.expert_count") or 0
    used = _optional_int(fields, f"{arch}.expert_used_count") or 0
    expert_weights = sum(e for name, _, e in tensors if "_exps." in name or name.endswith("_exps"))
    if experts <= 1 or not used or not expert_weights:
        return total, None
    return total, total - expert_weights + expert_weights * min(used, experts) // experts


def _vocab_size(fields: Mapping[str, Any], arch: str) -> int | None:
    size = _optional_int(fields, f"{arch}.vocab_size")
    if size is not None:
        return size
    tokens = fields.get("tokenizer.ggml.tokens")
    if isinstance(tokens, SkippedList):
        return tokens.count
    return None if tokens is None else len(tokens)
