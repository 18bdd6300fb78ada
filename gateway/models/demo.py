"""Small llama-architecture GGUF models with random weights, generated locally (no downloads).

The models speak a byte-level GPT-2 BPE vocabulary (every UTF-8 string round-trips) and carry a
ChatML chat template, so llama-cpp-python can load them and serve chat completions. Their output
is babble. Two sizes:

* ``tiny``: 2 layers, dim 64, f32, about 0.5 MB. For tests.
* ``bench``: 12 layers, dim 768, vocab 32000, about 125M parameters in q8_0. For benchmarks.

The ``output`` rows of the control tokens are zero and a constant residual channel lifts every
other logit well above zero, so the model practically never emits EOS on its own: generations run
to ``max_tokens`` (fixed token counts for benchmarks). A grammar can still force EOS.
"""

from __future__ import annotations

import itertools
import logging
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # numpy is imported when a model is written, not by the gateway
    import numpy as np
    import numpy.typing as npt

    F32Array = npt.NDArray[np.float32]

DemoSize = Literal["tiny", "bench"]

CONTROL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
"""Control tokens, with ids 256, 257, 258 in every size; ``<|im_end|>`` is EOS."""

CHATML_TEMPLATE = (
    "{%- for message in messages -%}\n"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}\n"
    "{%- if message['content'] is string -%}{{- message['content'] -}}\n"
    "{%- elif message['content'] -%}{%- for part in message['content'] -%}\n"
    "{%- if part['type'] == 'text' -%}{{- part['text'] -}}{%- endif -%}\n"
    "{%- endfor -%}{%- endif -%}\n"
    "{%- if message['tool_calls'] is defined and message['tool_calls'] -%}\n"
    "{%- for call in message['tool_calls'] -%}\n"
    "{{- '\\n<tool_call>\\n' -}}{{- call['function'] | tojson -}}{{- '\\n</tool_call>' -}}\n"
    "{%- endfor -%}{%- endif -%}\n"
    "{{- '<|im_end|>\\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}\n"
)
"""ChatML chat template (system/user/assistant/tool roles) embedded in every demo model."""

# BPE merges in GPT-2's byte-to-unicode spelling ("Ġ" is a space); each result is in the vocab.
_MERGES = (
    "Ġ t", "h e", "i n", "r e", "o n", "Ġt he", "e r", "Ġ a", "Ġ s", "e n", "a t", "o r",
    "Ġ w", "Ġ o", "e s", "l l", "Ġ i", "i s", "a n", "in g", "Ġ c", "e d", "Ġ h", "o u",
    "Ġ b", "Ġ f", "Ġ m", "Ġ p", "i t", "a r", "Ġa n", "Ġan d", "Ġ is", "Ġo f", "Ġt o", "Ġ in",
)  # fmt: skip
_BIAS_DIM = 0  # residual channel held constant: lifts every non-control logit above zero
_LOGIT_LIFT = 16.0  # output weight of that channel, times sqrt(n_embd): lifts logits by ~10


@dataclass(frozen=True)
class _Spec:
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_vocab: int
    quantized: bool


_SPECS: dict[str, _Spec] = {
    "tiny": _Spec(2, 64, 4, 2, 128, 384, quantized=False),
    "bench": _Spec(12, 768, 12, 4, 2048, 32000, quantized=True),
}


def _byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte-to-unicode map: printable bytes stay, the rest move past 255."""
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    extra = (b for b in range(256) if b not in keep)
    mapping = {b: chr(b) for b in keep}
    mapping.update({b: chr(256 + i) for i, b in enumerate(extra)})
    return mapping


def _vocab(n_vocab: int) -> tuple[list[str], list[int], list[str]]:
    """Return (tokens, token types, merges): bytes, control tokens, merge results, filler words."""
    normal, control = 1, 3  # gguf.TokenType.NORMAL / CONTROL; byte tokens must be NORMAL for BPE
    by_byte = _byte_to_unicode()
    tokens = [by_byte[b] for b in range(256)] + list(CONTROL_TOKENS)
    tokens += [m.replace(" ", "") for m in _MERGES]
    seen = set(tokens)
    # Fillers: pseudo-words ("Ġba", "Ġkito", ...) that decode to text but that the tokenizer
    # never produces (no merges lead to them), so random generations read like babble.
    syllables = [c + v for c in "bdfghklmnprstvz" for v in "aeiou"]
    words = ("Ġ" + "".join(p) for n in (1, 2, 3) for p in itertools.product(syllables, repeat=n))
    tokens += itertools.islice((w for w in words if w not in seen), n_vocab - len(tokens))
    types = [control if t in CONTROL_TOKENS else normal for t in tokens]
    return tokens, types, list(_MERGES)


def _quantize_q8_0(data: F32Array) -> npt.NDArray[np.uint8]:
    """Quantize a (rows, cols) f32 array to q8_0 bytes, shape (rows, cols // 32 * 34)."""
    import gguf
    import numpy as np

    return np.asarray(gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0), dtype=np.uint8)


def _tensors(spec: _Spec, n_control: int, seed: int) -> Iterator[tuple[str, F32Array]]:
    """Yield (GGUF tensor name, numpy (rows, cols) array) for every weight, deterministically."""
    import numpy as np

    rng = np.random.default_rng(seed)
    d, head_dim = spec.n_embd, spec.n_embd // spec.n_head
    n_kv = spec.n_head_kv * head_dim

    def dense(rows: int, cols: int, gain: float = 1.0, zero_bias_row: bool = False) -> F32Array:
        w = rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(gain / cols**0.5)
        if zero_bias_row:  # nothing writes into the constant residual channel
            w[_BIAS_DIM] = 0.0
        return w

    ones = np.ones(d, dtype=np.float32)
    embd = rng.standard_normal((spec.n_vocab, d), dtype=np.float32)
    embd[:, _BIAS_DIM] = np.float32(d**0.5)  # large and constant: survives every RMS norm
    yield "token_embd.weight", embd
    for i in range(spec.n_layer):
        yield f"blk.{i}.attn_norm.weight", ones
        yield f"blk.{i}.attn_q.weight", dense(d, d)
        yield f"blk.{i}.attn_k.weight", dense(n_kv, d)
        yield f"blk.{i}.attn_v.weight", dense(n_kv, d)
        yield f"blk.{i}.attn_output.weight", dense(d, d, 0.5, zero_bias_row=True)
        yield f"blk.{i}.ffn_norm.weight", ones
        yield f"blk.{i}.ffn_gate.weight", dense(spec.n_ff, d)
        yield f"blk.{i}.ffn_up.weight", dense(spec.n_ff, d)
        yield f"blk.{i}.ffn_down.weight", dense(d, spec.n_ff, 0.5, zero_bias_row=True)
    yield "output_norm.weight", ones
    output = dense(spec.n_vocab, d, 2.0)
    output[:, _BIAS_DIM] = np.float32(_LOGIT_LIFT / d**0.5)
    # Half the lift (~5 logits less) for raw bytes outside printable ASCII: mostly readable text.
    output[[b for b in range(256) if not 0x20 <= b < 0x7F], _BIAS_DIM] *= np.float32(0.5)
    output[256 : 256 + n_control] = 0.0  # control tokens: logit exactly 0, far below the rest
    yield "output.weight", output


def _write_gguf(target: str, size: DemoSize, seed: int) -> None:
    """Write the whole GGUF file for ``size`` to ``target`` (any existing content replaced)."""
    import gguf

    spec = _SPECS[size]
    tokens, types, merges = _vocab(spec.n_vocab)
    writer: Any = gguf.GGUFWriter(target, "llama")
    writer.add_name(f"shunter-demo-{size}")
    writer.add_description(f"Random-weight demo model (seed {seed}); its output is babble.")
    writer.add_context_length(4096)
    writer.add_embedding_length(spec.n_embd)
    writer.add_block_count(spec.n_layer)
    writer.add_feed_forward_length(spec.n_ff)
    writer.add_head_count(spec.n_head)
    writer.add_head_count_kv(spec.n_head_kv)
    writer.add_rope_dimension_count(spec.n_embd // spec.n_head)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(spec.n_vocab)
    ftype = gguf.LlamaFileType.MOSTLY_Q8_0 if spec.quantized else gguf.LlamaFileType.ALL_F32
    writer.add_file_type(int(ftype))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokens.index("<|endoftext|>"))
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHATML_TEMPLATE)
    if spec.quantized:
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    for name, array in _tensors(spec, len(CONTROL_TOKENS), seed):
        if spec.quantized and array.ndim == 2:
            q8 = gguf.GGMLQuantizationType.Q8_0
            writer.add_tensor(name, _quantize_q8_0(array), raw_dtype=q8)
        else:
            writer.add_tensor(name, array)
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()


def write_demo_model(path: Path, size: DemoSize = "tiny", seed: int = 0) -> Path:
    """Generate a random-weight llama GGUF model at ``path`` and return ``path``.

    The file is written to a temporary file in the same directory and moved into place with
    ``os.replace``, so readers never see a partial model. The same ``size`` and ``seed`` always
    give a byte-identical file. Parent directories are created as needed.
    """
    if size not in _SPECS:
        raise ValueError(f"unknown demo model size {size!r}; expected one of {sorted(_SPECS)}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        # the writer narrates every file at INFO; a generated demo model is not news
        logging.getLogger("gguf").setLevel(logging.WARNING)
        _write_gguf(tmp, size, seed)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def ensure_demo_model(path: Path, size: DemoSize = "tiny") -> Path:
    """Return ``path``, generating the demo model there (seed 0) only if no file exists yet."""
    path = Path(path)
    if not path.exists():
        write_demo_model(path, size)
    return path
