"""A tiny GGUF written with gguf.GGUFWriter, read back by the planner."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from gateway.planner import Device, plan_memory, shape_from_gguf

EMBD, HEADS, VOCAB = 64, 4, 32


def _write(path: Path, *, kv_heads: int | list[int], key_length: int | None = None) -> None:
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name("tiny-test")
    writer.add_block_count(2)
    writer.add_context_length(256)
    writer.add_embedding_length(EMBD)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(kv_heads)
    if key_length is not None:
        writer.add_key_length(key_length)
        writer.add_value_length(key_length // 2)
    writer.add_token_list([f"t{i}" for i in range(VOCAB)])
    writer.add_tensor("token_embd.weight", np.zeros((VOCAB, EMBD), dtype=np.float32))
    writer.add_tensor("blk.0.attn_q.weight", np.zeros((EMBD, EMBD), dtype=np.float16))
    writer.add_tensor("blk.0.ffn_up.weight", np.zeros((2 * EMBD, EMBD), dtype=np.float16))
    writer.add_tensor("blk.1.attn_q.weight", np.zeros((EMBD, EMBD), dtype=np.float16))
    writer.add_tensor("output_norm.weight", np.zeros(EMBD, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.gguf"
    _write(path, kv_heads=[2, 1])
    return path


def test_metadata_and_weights(tiny: Path) -> None:
    shape = shape_from_gguf(tiny)
    assert shape.name == "tiny-test"
    assert (shape.n_layers, shape.context_length, shape.embedding_length) == (2, 256, EMBD)
    assert shape.kv_heads == (2, 1)
    assert (shape.key_length, shape.value_length) == (EMBD // HEADS, EMBD // HEADS)
    assert shape.vocab_size == VOCAB
    block0 = EMBD * EMBD * 2 + 2 * EMBD * EMBD * 2
    assert shape.layer_bytes == (block0, EMBD * EMBD * 2)
    assert shape.other_bytes == VOCAB * EMBD * 4 + EMBD * 4
    assert shape.source == "gguf"


def test_per_layer_kv_heads_in_kv_formula(tiny: Path) -> None:
    shape = shape_from_gguf(tiny)
    head_dim = EMBD // HEADS
    assert shape.kv_bytes_per_token("f16") == (2 + 1) * (head_dim + head_dim) * 2
    assert shape.kv_bytes_per_token("q8_0") == (2 + 1) * 2 * head_dim * 1.0625


def test_explicit_key_and_value_length(tmp_path: Path) -> None:
    path = tmp_path / "kv.gguf"
    _write(path, kv_heads=2, key_length=32)
    shape = shape_from_gguf(path)
    assert (shape.key_length, shape.value_length, shape.kv_heads) == (32, 16, (2, 2))
    assert shape.kv_bytes_per_token() == 2 * 2 * (32 + 16) * 2


def test_plan_from_gguf(tiny: Path) -> None:
    shape = shape_from_gguf(tiny)
    plan = plan_memory(shape, Device("gpu", "cuda", 1 << 30), slots=2)
    assert plan.fit == "fits"
    assert plan.context == 256
    assert plan.kv_bytes == 256 * 2 * shape.kv_bytes_per_token()
    assert plan.weights_bytes == sum(shape.layer_bytes) + shape.other_bytes


def test_missing_required_key(tmp_path: Path) -> None:
    path = tmp_path / "bad.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_block_count(1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ValueError, match=r"lacks 'llama.attention.head_count'"):
        shape_from_gguf(path)
