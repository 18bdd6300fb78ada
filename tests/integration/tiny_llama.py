"""A tiny random-weight Llama in Hugging Face layout, built locally (no download).

``config.json``, ``model.safetensors`` (torch tensors) and a byte-level BPE tokenizer
trained with ``tokenizers`` on a few sentences, saved with a ChatML chat template.
head_dim is 64 (vLLM's CPU attention needs it). Needs torch, safetensors, tokenizers and
transformers, which vLLM brings.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Shunter routes requests between engines and remote APIs.",
    "Hello there, how are you today? I am fine, thank you.",
    '{"name": "value", "count": 3, "items": [1, 2, 3], "ok": true}',
    "Once upon a time a small model answered every question at random.",
]
HIDDEN, HEADS, KV_HEADS, LAYERS, FFN = 128, 2, 1, 2, 256


def write_tiny_llama(directory: Path, *, seed: int = 0) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    vocab = _write_tokenizer(directory)
    config: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": FFN,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HIDDEN // HEADS,
        "vocab_size": vocab,
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    _write_weights(directory, vocab, seed)
    return directory


def _write_tokenizer(directory: Path) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=384,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(directory))
    return int(tokenizer.get_vocab_size())


def _write_weights(directory: Path, vocab: int, seed: int) -> None:
    import torch
    from safetensors.torch import save_file

    generator = torch.Generator().manual_seed(seed)
    head_dim = HIDDEN // HEADS

    def rand(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=generator) * 0.05).to(torch.bfloat16)

    def ones(size: int) -> torch.Tensor:
        return torch.ones(size, dtype=torch.bfloat16)

    tensors = {
        "model.embed_tokens.weight": rand(vocab, HIDDEN),
        "model.norm.weight": ones(HIDDEN),
        "lm_head.weight": rand(vocab, HIDDEN),
    }
    for i in range(LAYERS):
        prefix = f"model.layers.{i}."
        tensors |= {
            prefix + "input_layernorm.weight": ones(HIDDEN),
            prefix + "post_attention_layernorm.weight": ones(HIDDEN),
            prefix + "self_attn.q_proj.weight": rand(HEADS * head_dim, HIDDEN),
            prefix + "self_attn.k_proj.weight": rand(KV_HEADS * head_dim, HIDDEN),
            prefix + "self_attn.v_proj.weight": rand(KV_HEADS * head_dim, HIDDEN),
            prefix + "self_attn.o_proj.weight": rand(HIDDEN, HEADS * head_dim),
            prefix + "mlp.gate_proj.weight": rand(FFN, HIDDEN),
            prefix + "mlp.up_proj.weight": rand(FFN, HIDDEN),
            prefix + "mlp.down_proj.weight": rand(HIDDEN, FFN),
        }
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
