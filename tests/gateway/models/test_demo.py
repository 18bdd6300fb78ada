"""Tests for the random-weight demo GGUF models (gateway.models.demo)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gateway.models import demo
from gateway.models.demo import CHATML_TEMPLATE, CONTROL_TOKENS, ensure_demo_model, write_demo_model

gguf = pytest.importorskip("gguf")

PROMPT = "The quick brown fox"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _field(reader: Any, key: str) -> Any:
    return reader.fields[key].contents()


def _load(path: Path) -> Any:
    """Load with one thread: a busy machine makes llama.cpp's OpenMP barriers crawl (~0.5 s)."""
    llama_cpp = pytest.importorskip("llama_cpp")
    return llama_cpp.Llama(
        model_path=str(path), n_ctx=512, n_threads=1, n_threads_batch=1, verbose=False
    )


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_demo_model(tmp_path_factory.mktemp("demo") / "tiny.gguf")


@pytest.fixture(scope="module")
def llm(tiny_path: Path) -> Iterator[Any]:
    model = _load(tiny_path)
    yield model
    model.close()


def _greedy(model: Any, max_tokens: int = 16) -> str:
    out = model(PROMPT, max_tokens=max_tokens, temperature=0.0)
    text: str = out["choices"][0]["text"]
    assert out["choices"][0]["finish_reason"] == "length"
    assert out["usage"]["completion_tokens"] >= max_tokens
    return text


def test_tiny_is_small_and_deterministic(tmp_path: Path, tiny_path: Path) -> None:
    assert tiny_path.stat().st_size < 1_000_000
    again = write_demo_model(tmp_path / "again.gguf", "tiny", seed=0)
    assert _sha256(again) == _sha256(tiny_path)
    other = write_demo_model(tmp_path / "other.gguf", "tiny", seed=1)
    assert _sha256(other) != _sha256(tiny_path)


def test_atomic_write_replaces_and_leaves_no_temp_files(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "model.gguf"
    write_demo_model(target, seed=1)
    first = _sha256(target)
    write_demo_model(target, seed=2)
    assert _sha256(target) != first
    assert [p.name for p in target.parent.iterdir()] == ["model.gguf"]


def test_unknown_size_is_rejected_without_leftovers(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown demo model size"):
        write_demo_model(tmp_path / "x.gguf", "huge")  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_ensure_generates_only_if_missing(tmp_path: Path) -> None:
    target = tmp_path / "m.gguf"
    assert ensure_demo_model(target, "tiny") == target
    assert _sha256(target) == _sha256(write_demo_model(tmp_path / "ref.gguf"))
    target.write_bytes(b"not regenerated")
    ensure_demo_model(target, "tiny")
    assert target.read_bytes() == b"not regenerated"


def test_tiny_metadata(tiny_path: Path) -> None:
    reader = gguf.GGUFReader(tiny_path)
    assert _field(reader, "general.architecture") == "llama"
    assert _field(reader, "general.name") == "shunter-demo-tiny"
    assert _field(reader, "llama.context_length") == 4096
    assert _field(reader, "llama.block_count") == 2
    assert _field(reader, "llama.attention.head_count_kv") == 2
    assert _field(reader, "tokenizer.ggml.model") == "gpt2"
    assert _field(reader, "tokenizer.ggml.pre") == "gpt-2"
    assert _field(reader, "tokenizer.chat_template") == CHATML_TEMPLATE
    tokens = _field(reader, "tokenizer.ggml.tokens")
    types = _field(reader, "tokenizer.ggml.token_type")
    assert len(tokens) == len(types) == 384 == len(set(tokens))
    assert tokens[_field(reader, "tokenizer.ggml.eos_token_id")] == "<|im_end|>"
    assert tokens[_field(reader, "tokenizer.ggml.bos_token_id")] == "<|endoftext|>"
    control = [t for t, kind in zip(tokens, types, strict=True) if kind == gguf.TokenType.CONTROL]
    assert control == list(CONTROL_TOKENS)
    for merge in _field(reader, "tokenizer.ggml.merges"):
        assert merge.replace(" ", "") in tokens
    output = next(t for t in reader.tensors if t.name == "output.weight")
    rows = np.asarray(output.data).reshape(384, -1)
    ids = [tokens.index(t) for t in CONTROL_TOKENS]
    assert not rows[ids].any()
    assert rows[np.setdiff1d(np.arange(384), ids)].any(axis=1).all()


def test_bench_spec_without_writing_it() -> None:
    spec = demo._SPECS["bench"]
    tokens, types, _ = demo._vocab(spec.n_vocab)
    assert len(tokens) == len(set(tokens)) == len(types) == 32000
    d, kv = spec.n_embd, spec.n_embd // spec.n_head * spec.n_head_kv
    per_layer = 2 * d * d + 2 * kv * d + 3 * d * spec.n_ff + 2 * d
    params = spec.n_layer * per_layer + 2 * spec.n_vocab * d + d
    assert 120e6 < params < 130e6


@pytest.mark.parametrize("text", ["Hello, wörld! 你好 🚀\n\tthe end", "", " ", "\x00\x7f\u00ff"])
def test_tokenize_round_trip(llm: Any, text: str) -> None:
    tokens = llm.tokenize(text.encode(), add_bos=False, special=False)
    assert llm.detokenize(tokens) == text.encode()


def test_control_tokens_are_single_tokens(llm: Any) -> None:
    ids = llm.tokenize("".join(CONTROL_TOKENS).encode(), add_bos=False, special=True)
    assert ids == [256, 257, 258]
    assert llm.token_eos() == 258
    the = demo._vocab(384)[0].index("Ġthe")  # merges "Ġ t", "h e", "Ġt he"
    assert llm.tokenize(b" the", add_bos=False) == [the]


def test_greedy_generation_is_deterministic(llm: Any, tiny_path: Path) -> None:
    first = _greedy(llm)
    assert first.strip()
    assert _greedy(llm) == first
    second = _load(tiny_path)
    try:
        assert _greedy(second) == first
    finally:
        second.close()


def test_sampling_runs_to_max_tokens(llm: Any) -> None:
    for seed in range(5):
        out = llm(PROMPT, max_tokens=48, temperature=1.0, seed=seed)
        assert out["choices"][0]["finish_reason"] == "length"


def test_grammar_can_force_eos(llm: Any) -> None:
    llama_cpp = pytest.importorskip("llama_cpp")
    grammar = llama_cpp.LlamaGrammar.from_string('root ::= "ok"', verbose=False)
    out = llm(PROMPT, max_tokens=16, temperature=0.0, grammar=grammar)
    assert out["choices"][0]["text"] == "ok"
    assert out["choices"][0]["finish_reason"] == "stop"


def test_chat_completion_uses_chatml_template(llm: Any) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]  # fmt: skip
    out = llm.create_chat_completion(messages=messages, max_tokens=8, temperature=0.0)
    choice = out["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert isinstance(choice["message"]["content"], str)
    assert choice["finish_reason"] == "length"
    again = llm.create_chat_completion(messages=messages, max_tokens=8, temperature=0.0)
    assert again["choices"][0]["message"]["content"] == choice["message"]["content"]


def test_chat_template_renders_chatml() -> None:
    jinja2 = pytest.importorskip("jinja2")
    template = jinja2.Environment().from_string(CHATML_TEMPLATE)
    messages = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": [{"type": "text", "text": "U"}]},
        {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f"}}]},
        {"role": "tool", "content": "T"},
    ]
    rendered = template.render(messages=messages, add_generation_prompt=True)
    assert rendered == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
        '<|im_start|>assistant\n\n<tool_call>\n{"name": "f"}\n</tool_call><|im_end|>\n'
        "<|im_start|>tool\nT<|im_end|>\n<|im_start|>assistant\n"
    )
    assert not template.render(messages=[], add_generation_prompt=False)
