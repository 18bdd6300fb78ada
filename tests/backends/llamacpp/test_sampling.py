"""Log-probabilities from raw logits (backends/llamacpp/sampling.py)."""

from __future__ import annotations

import math

import numpy as np

from backends.llamacpp.sampling import chat_logprobs, completion_logprobs, token_logprob

PIECES = {0: b"a", 1: b"b", 2: b"\xc3\xa9", 3: b"d"}


def test_token_logprob_is_the_log_softmax_and_top_is_ranked() -> None:
    logits = np.array([1.0, 3.0, 2.0, -1.0], dtype=np.float32)
    total = sum(math.exp(x) for x in logits.tolist())
    result = token_logprob(logits, 2, 3, PIECES.__getitem__)
    # the exponentials are taken in the logits' float32: a float32's precision, not 1e-9
    assert math.isclose(result.logprob, math.log(math.exp(2.0) / total), rel_tol=1e-6)
    assert [piece for piece, _ in result.top] == [b"b", b"\xc3\xa9", b"a"]
    assert math.isclose(result.top[0][1], math.log(math.exp(3.0) / total), rel_tol=1e-6)
    assert token_logprob(logits, 0, 0, PIECES.__getitem__).top == ()


def test_large_logits_do_not_overflow() -> None:
    logits = np.array([1000.0, 999.0], dtype=np.float32)
    result = token_logprob(logits, 1, 1, PIECES.__getitem__)
    assert math.isclose(result.logprob, -math.log1p(math.e), rel_tol=1e-6)


def test_chat_logprobs_object_has_openai_fields() -> None:
    item = token_logprob(np.array([0.0, 0.0, 1.0, 0.0]), 2, 1, PIECES.__getitem__)
    (entry,) = chat_logprobs([item])["content"]
    assert entry["token"] == "é" and entry["bytes"] == [0xC3, 0xA9]
    assert set(entry) == {"token", "logprob", "bytes", "top_logprobs"}
    assert set(entry["top_logprobs"][0]) == {"token", "logprob", "bytes"}


def test_completion_logprobs_count_offsets_in_characters() -> None:
    items = [
        token_logprob(np.array([2.0, 1.0, 0.0, 0.0]), 0, 2, PIECES.__getitem__),
        token_logprob(np.array([0.0, 0.0, 1.0, 0.0]), 2, 1, PIECES.__getitem__),
        token_logprob(np.array([0.0, 1.0, 0.0, 0.0]), 1, 0, PIECES.__getitem__),
    ]
    result = completion_logprobs(items, 10)
    assert result["tokens"] == ["a", "é", "b"]
    assert result["text_offset"] == [10, 11, 12]  # "é" is one character, two bytes
    assert result["token_logprobs"] == [i.logprob for i in items]
    assert list(result["top_logprobs"][0]) == ["a", "b"] and result["top_logprobs"][2] == {}
