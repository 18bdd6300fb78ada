"""KV-cache and weight figures against the formula and published model numbers."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.planner import (
    ModelShape,
    count_parameters,
    kv_dtype_bytes,
    shape_from_hf_config,
)

GIB = 1 << 30
Config = dict[str, Any]


def kv_formula(layers: int, kv_heads: int, head_dim: int, bytes_per_elem: float) -> float:
    """Bytes per token: 2 (K and V) x layers x kv_heads x head_dim x bytes per element."""
    return 2 * layers * kv_heads * head_dim * bytes_per_elem


def test_llama_3_70b_kv_per_token_and_4k_context(shape70: ModelShape) -> None:
    expected = kv_formula(layers=80, kv_heads=8, head_dim=128, bytes_per_elem=2)
    assert shape70.kv_bytes_per_token("f16") == expected == 327_680
    assert expected / (1 << 20) == pytest.approx(0.3125)  # MiB per token
    assert shape70.kv_bytes_per_token("f16") * 4096 == 1_342_177_280
    assert shape70.kv_bytes_per_token("f16") * 4096 / GIB == pytest.approx(1.25)


def test_llama_31_8b_from_config(llama_31_8b: Config, shape8: ModelShape) -> None:
    assert count_parameters(llama_31_8b).total(32) == 8_030_261_248
    assert shape8.weights_bytes == 2 * 8_030_261_248
    assert shape8.kv_bytes_per_token() == kv_formula(32, 8, 128, 2) == 131_072
    assert (shape8.n_layers, shape8.key_length, shape8.context_length) == (32, 128, 131072)
    assert shape8.kv_bytes_per_token() * 8192 == GIB
    assert shape8.source == "hf-config (estimated weights)"


def test_head_dim_key_wins_over_hidden_over_heads(llama_31_8b: Config) -> None:
    config = llama_31_8b | {"head_dim": 256}
    assert shape_from_hf_config(config).kv_bytes_per_token() == kv_formula(32, 8, 256, 2)


def test_missing_kv_heads_means_full_attention(llama_31_8b: Config) -> None:
    config = {k: v for k, v in llama_31_8b.items() if k != "num_key_value_heads"}
    assert shape_from_hf_config(config).kv_bytes_per_token() == kv_formula(32, 32, 128, 2)


@pytest.mark.parametrize(
    ("dtype", "per_elem"),
    [
        ("f16", 2.0),
        ("bf16", 2.0),
        ("auto", 2.0),
        ("f32", 4.0),
        ("q8_0", 1.0625),
        ("q4_0", 0.5625),
        ("fp8", 1.0),
        ("FP8_E4M3", 1.0),
    ],
)
def test_kv_dtype_effect(shape70: ModelShape, dtype: str, per_elem: float) -> None:
    assert kv_dtype_bytes(dtype) == per_elem
    assert shape70.kv_bytes_per_token(dtype) == kv_formula(80, 8, 128, per_elem)


def test_separate_k_and_v_dtypes(shape8: ModelShape) -> None:
    assert shape8.kv_bytes_per_token("q8_0", "q4_0") == 32 * 8 * 128 * (1.0625 + 0.5625)
    assert shape8.kv_bytes_per_token("q8_0") / shape8.kv_bytes_per_token("f16") == 1.0625 / 2


def test_unknown_kv_dtype() -> None:
    with pytest.raises(ValueError, match="unknown kv dtype 'q3_k'"):
        kv_dtype_bytes("q3_k")


def test_quantized_config_uses_bits_plus_group_scales(llama_31_8b: Config) -> None:
    awq = llama_31_8b | {
        "torch_dtype": "float16",
        "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128},
    }
    params = count_parameters(awq)
    linear = 0.5 + (2 + 0.5) / 128
    layers = 32 * (params.layer_linear * linear + params.layer_other * 2)
    expected = layers + (params.embeddings + params.head) * 2
    assert shape_from_hf_config(awq).weights_bytes == pytest.approx(expected, abs=64)
    fp8 = llama_31_8b | {"quantization_config": {"quant_method": "fp8"}}
    bf16 = shape_from_hf_config(llama_31_8b).weights_bytes
    assert shape_from_hf_config(fp8).weights_bytes < 0.6 * bf16


def test_declared_weight_bytes_replace_the_estimate(llama_31_8b: Config) -> None:
    shape = shape_from_hf_config(llama_31_8b, weights_bytes=10 * GIB)
    assert shape.weights_bytes == 10 * GIB
    assert shape.source == "hf-config"


def test_moe_counts_every_expert(llama_31_8b: Config) -> None:
    mixtral = llama_31_8b | {"num_local_experts": 8}
    dense = count_parameters(llama_31_8b)
    moe = count_parameters(mixtral)
    assert moe.layer_linear - dense.layer_linear == 7 * 3 * 4096 * 14336 + 4096 * 8


def test_text_config_of_multimodal_model(llama_31_8b: Config) -> None:
    wrapped = {"model_type": "llava", "text_config": llama_31_8b, "vision_config": {}}
    assert shape_from_hf_config(wrapped).weights_bytes == 2 * 8_030_261_248


def test_shape_checks_per_layer_lengths() -> None:
    with pytest.raises(ValueError, match="3 entries"):
        ModelShape("m", 3, (1, 1), 8, 8, (1, 1, 1), 0)


def test_incomplete_config_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="lacks num_hidden_layers, hidden_size"):
        shape_from_hf_config({"num_attention_heads": 8})
