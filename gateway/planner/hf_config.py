"""Estimate a :class:`ModelShape` from a Hugging Face ``config.json`` (vLLM models).

Without the safetensors sizes, weights are estimated from a parameter count computed from
the config's shapes (decoder-only transformer):

* embeddings ``vocab x hidden``, plus an untied output head of the same size;
* per layer: attention ``hidden x (heads + 2 x kv_heads) x head_dim + heads x head_dim x hidden``,
  an MLP of 3 matrices ``hidden x intermediate`` (2 for ungated families such as GPT-2),
  or for MoE ``experts x 3 x hidden x moe_intermediate`` + router + shared experts,
  and two norms;

at ``torch_dtype`` (2 bytes for bf16/f16), except that linear layers use the
``quantization_config`` width: ``bits`` (GPTQ/AWQ/bitsandbytes) plus per-group scales,
1 byte for fp8, 4.25 bits for mxfp4. Llama-3.1-8B comes out at 8,030,261,248 parameters,
its published count. Vision towers of multimodal configs are not counted (``text_config``
is used when present).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.planner.shape import ModelShape

_DTYPE_BYTES: Mapping[str, float] = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0}
_REQUIRED = ("num_hidden_layers", "hidden_size", "num_attention_heads")
_UNGATED = frozenset({"gpt2", "gpt_neox", "gptj", "opt", "bloom", "falcon", "gpt_bigcode"})


@dataclass(frozen=True)
class ParamCount:
    """Parameters per layer (linear and other) and outside the layers. ``layer_experts``:
    the routed experts' part of ``layer_linear`` (0 for a dense model), of which a token uses
    ``experts_used`` of ``experts``."""

    layer_linear: int
    layer_other: int
    embeddings: int
    head: int
    layer_experts: int = 0
    experts: int = 0
    experts_used: int = 0

    def total(self, n_layers: int) -> int:
        """All parameters of the model."""
        return n_layers * (self.layer_linear + self.layer_other) + self.embeddings + self.head

    def active(self, n_layers: int) -> int | None:
        """The parameters one token uses in a mixture of experts; ``None`` when dense (or
        when the config does not say how many experts a token uses)."""
        if not self.layer_experts or not self.experts_used or self.experts <= 1:
            return None
        unused = self.layer_experts * (self.experts - self.experts_used) // self.experts
        return self.total(n_layers) - n_layers * unused


def text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language-model part of a (possibly multimodal) config."""
    inner = config.get("text_config")
    return inner if isinstance(inner, Mapping) else config


def count_parameters(config: Mapping[str, Any]) -> ParamCount:
    """Count parameters from a config's shapes (see the module docstring)."""
    cfg = text_config(config)
    hidden, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    vocab = int(cfg.get("vocab_size") or 0)
    attention = hidden * (heads + 2 * kv_heads) * head_dim + heads * head_dim * hidden
    layer_linear = attention + _mlp_params(cfg, hidden)
    embeddings = vocab * hidden
    tied = bool(cfg.get("tie_word_embeddings", config.get("tie_word_embeddings", True)))
    experts = _experts(cfg)
    per_expert = int(cfg.get("moe_intermediate_size") or cfg.get("intermediate_size") or 0)
    return ParamCount(
        layer_linear=layer_linear,
        layer_other=2 * hidden,
        embeddings=embeddings,
        head=hidden + (0 if tied else vocab * hidden),
        layer_experts=experts * 3 * hidden * per_expert,
        experts=experts,
        experts_used=int(cfg.get("num_experts_per_tok") or 0),
    )


def _experts(cfg: Mapping[str, Any]) -> int:
    return int(
        cfg.get("num_local_experts") or cfg.get("num_experts") or cfg.get("n_routed_experts") or 0
    )


def _mlp_params(cfg: Mapping[str, Any], hidden: int) -> int:
    matrices = 2 if cfg.get("model_type") in _UNGATED else 3
    intermediate = int(cfg.get("intermediate_size") or 4 * hidden)
    experts = _experts(cfg)
    if not experts:
        return matrices * hidden * intermediate
    per_expert = int(cfg.get("moe_intermediate_size") or intermediate)
    shared_size = int(cfg.get("shared_expert_intermediate_size") or 0)
    shared_size += int(cfg.get("n_shared_experts") or 0) * per_expert
    return experts * 3 * hidden * per_expert + hidden * experts + 3 * hidden * shared_size


def dtype_bytes(config: Mapping[str, Any]) -> float:
    """Bytes per unquantized parameter from ``torch_dtype`` (or ``dtype``); 2 if unset."""
    cfg = text_config(config)
    name = str(cfg.get("torch_dtype") or config.get("torch_dtype") or config.get("dtype") or "")
    return _DTYPE_BYTES.get(name.replace("torch.", ""), 2.0)


def linear_bytes_per_param(config: Mapping[str, Any]) -> float:
    """Bytes per parameter of quantized linear layers (``dtype_bytes`` when unquantized)."""
    quant = config.get("quantization_config")
    if not isinstance(quant, Mapping):
        return dtype_bytes(config)
    method = str(quant.get("quant_method", "")).lower()
    if method in ("fp8", "fbgemm_fp8"):
        return 1.0
    if method == "mxfp4":
        return 4.25 / 8
    bits = _bits(quant)
    if bits is None:
        return dtype_bytes(config)
    group = int(quant.get("group_size") or quant.get("q_group_size") or 128)
    scale_bytes = (2 + bits / 8) / group if group > 0 else 0.0
    return bits / 8 + scale_bytes


def _bits(quant: Mapping[str, Any]) -> int | None:
    for key in ("bits", "w_bit", "num_bits"):
        if quant.get(key):
            return int(quant[key])
    if quant.get("load_in_4bit"):
        return 4
    if quant.get("load_in_8bit"):
        return 8
    groups = quant.get("config_groups")
    if isinstance(groups, Mapping):
        for group in groups.values():
            weights = group.get("weights") if isinstance(group, Mapping) else None
            if isinstance(weights, Mapping) and weights.get("num_bits"):
                return int(weights["num_bits"])
    return None


def shape_from_hf_config(
    config: Mapping[str, Any], *, name: str | None = None, weights_bytes: int | None = None
) -> ModelShape:
    """Describe a model from its ``config.json`` dict.

    ``weights_bytes`` (e.g. the sum of its safetensors files) replaces the estimate; it is
    split between layers and the rest in the estimate's proportions.
    """
    cfg = text_config(config)
    missing = [k for k in _REQUIRED if k not in cfg]
    if missing:
        raise ValueError(f"config.json lacks {', '.join(missing)}")
    n_layers = int(cfg["num_hidden_layers"])
    hidden, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    params = count_parameters(config)
    full, linear = dtype_bytes(config), linear_bytes_per_param(config)
    layer = round(params.layer_linear * linear + params.layer_other * full)
    other = round((params.embeddings + params.head) * full)
    if weights_bytes is not None:
        scale = weights_bytes / (layer * n_layers + other)
        layer = round(layer * scale)
        other = weights_bytes - n_layers * layer
    context = cfg.get("max_position_embeddings") or config.get("max_position_embeddings")
    return ModelShape(
        name=name or str(config.get("_name_or_path") or cfg.get("model_type") or "model"),
        n_layers=n_layers,
        kv_heads=(kv_heads,) * n_layers,
        key_length=head_dim,
        value_length=head_dim,
        layer_bytes=(layer,) * n_layers,
        other_bytes=other,
        context_length=int(context) if context else None,
        embedding_length=hidden,
        vocab_size=int(cfg["vocab_size"]) if cfg.get("vocab_size") else None,
        source="hf-config" if weights_bytes is not None else "hf-config (estimated weights)",
        parameters=params.total(n_layers),
        active_parameters=params.active(n_layers),
    )
