"""Model sizes counted from a Hugging Face config (dense and mixture of experts) and read
from a local model directory, as routing's ``params_b`` uses them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from backends.vllm import VLLMSettings
from gateway.planner import ModelSize, count_parameters, size_of_hf_dir

MIXTRAL_8X7B: dict[str, Any] = {
    "model_type": "mixtral",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 32000,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "tie_word_embeddings": False,
    "max_position_embeddings": 32768,
}


def test_mixture_of_experts_total_and_active_parameters() -> None:
    # the published figures: 46.7B in all, 12.9B used per token
    params = count_parameters(MIXTRAL_8X7B)
    assert params.total(32) / 1e9 == pytest.approx(46.7, abs=0.05)
    active = params.active(32)
    assert active is not None and active / 1e9 == pytest.approx(12.9, abs=0.05)


def test_a_dense_model_has_no_active_count(llama_31_8b: dict[str, Any]) -> None:
    assert count_parameters(llama_31_8b).active(32) is None


def test_a_local_model_directory_gives_its_size(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(MIXTRAL_8X7B))
    size = size_of_hf_dir(tmp_path)
    assert size is not None and size.source == "hf-config"
    assert size.describe() == "46.7B, 12.9B active (hf-config)"
    settings = VLLMSettings(name="moe", backend="vllm", model=str(tmp_path))
    assert settings.model_size() == size
    declared = settings.model_copy(update={"params_b": 47.0})
    assert declared.model_size() == ModelSize(47.0, None, "declared")
    assert size_of_hf_dir(tmp_path / "absent") is None  # a hub id: nothing to read


def test_a_broken_config_is_an_unknown_size_for_routing(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="cannot read"):
        size_of_hf_dir(tmp_path)
    assert VLLMSettings(name="x", backend="vllm", model=str(tmp_path)).model_size() is None


def test_sizes_disagree_past_a_fifth() -> None:
    assert ModelSize(7.0).differs(ModelSize(8.5, source="gguf"))
    assert not ModelSize(7.0).differs(ModelSize(8.0, source="gguf"))
