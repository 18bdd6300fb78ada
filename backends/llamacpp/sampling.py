"""What one request asks of the batched llama.cpp engine, and its sampler chain.

:class:`GenerationJob` (prompt tokens, limits, :class:`Sampling`, stops, grammar) goes in;
text pieces and one :class:`Finished` come out.

Every sequence in a batch owns a llama.cpp sampler chain, built from its request's settings
the way llama-cpp-python's ``Llama._init_sampler`` does (penalties, grammar, then greedy, or
top-k / top-p / min-p / temperature / a seeded ``dist``). The chain keeps its own random state
and grammar state, so a seeded request samples the same tokens whatever runs beside it.

Chains are built on the event loop (only the model's vocabulary is read, which llama.cpp
allows from any thread), so a grammar llama.cpp rejects becomes a 400 before anything is
streamed. The scheduler thread frees the chain when the sequence ends.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.errors import InvalidRequestError

PENALTY_LAST_N = 64
"""Tokens that repetition / frequency / presence penalties look back over (llama.cpp's default)."""


@dataclass(frozen=True)
class Sampling:
    """Per-request sampling settings, in llama.cpp's terms. ``temperature == 0`` is greedy."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repeat_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    seed: int | None = None

    @property
    def penalized(self) -> bool:
        return (
            self.repeat_penalty != 1.0
            or self.frequency_penalty != 0.0
            or self.presence_penalty != 0.0
        )


@dataclass
class GenerationJob:
    """One request's work: prompt tokens in, text pieces and a :class:`Finished` out."""

    prompt_tokens: list[int]
    max_tokens: int
    sampling: Sampling
    stops: list[str] = field(default_factory=list)
    grammar: Any = None  # a llama_cpp.LlamaGrammar; compiled on submit, so errors are 400s
    grammar_param: str = "response_format"
    stream: bool = True  # False: the text arrives in one piece just before Finished
    cancelled: threading.Event = field(default_factory=threading.Event)
    top_logprobs: int | None = None  # None: no logprobs; else a TokenLogprob per token
    # control tokens written into the text (normally left out): tool-call markers such as
    # Mistral's [TOOL_CALLS], which the tool-call reader must see
    visible_tokens: frozenset[int] = frozenset()
    # the tokens sampled so far (appended by the engine's thread), kept for an answer that
    # stops short: a continuation elsewhere starts from them (see continued.py)
    generated: list[int] = field(default_factory=list)
    # the request's prefix chain (gateway.protocol.prefix), reported as held once its KV is
    prefix_chain: tuple[tuple[str, int], ...] = ()
    prefix_shared: int = 0  # its first links that many conversations share


@dataclass(frozen=True)
class Finished:
    reason: str  # "stop", "length" or "cancelled"
    prompt_tokens: int
    completion_tokens: int
    first_token_s: float | None
    cached_tokens: int = 0


@dataclass(frozen=True)
class TokenLogprob:
    """A sampled token's log-probability under the model's own distribution (before the
    request's temperature, penalties or grammar), with the ``top`` most likely tokens."""

    piece: bytes
    logprob: float
    top: tuple[tuple[bytes, float], ...] = ()


Event = str | TokenLogprob | Finished


def token_logprob(
    logits: Any, token: int, top: int, piece_of: Callable[[int], bytes]
) -> TokenLogprob:
    """``token``'s log-softmax from one row of raw ``logits`` (numpy, n_vocab floats), and
    the ``top`` highest alternatives (most likely first)."""
    import numpy as np

    # exp in the logits' own float32 (no float64 copy of the row: 5x faster on a 49k
    # vocabulary), summed in float64; the result differs by about 1e-9
    row = np.asarray(logits)
    peak = float(row.max())
    log_total = peak + float(np.log(np.exp(row - peak).sum(dtype=np.float64)))
    best: tuple[tuple[bytes, float], ...] = ()
    if top > 0:
        candidates = np.argpartition(row, -top)[-top:]
        ranked = candidates[np.argsort(row[candidates])[::-1]]
        best = tuple((piece_of(int(t)), float(row[t]) - log_total) for t in ranked)
    return TokenLogprob(piece_of(token), float(row[token]) - log_total, best)


def chat_logprobs(items: list[TokenLogprob]) -> dict[str, Any]:
    """OpenAI's ``choice.logprobs`` object for chat content."""
    content = [
        {**_token(i.piece, i.logprob), "top_logprobs": [_token(p, lp) for p, lp in i.top]}
        for i in items
    ]
    return {"content": content}


def _token(piece: bytes, logprob: float) -> dict[str, Any]:
    return {
        "token": piece.decode("utf-8", errors="replace"),
        "logprob": logprob,
        "bytes": list(piece),
    }


def completion_logprobs(items: list[TokenLogprob], first_offset: int) -> dict[str, Any]:
    """The legacy completions ``choice.logprobs`` object; ``text_offset`` counts characters
    from ``first_offset``."""
    tokens = [i.piece.decode("utf-8", errors="replace") for i in items]
    offsets, at = [], first_offset
    for token in tokens:
        offsets.append(at)
        at += len(token)
    return {
        "tokens": tokens,
        "token_logprobs": [i.logprob for i in items],
        "top_logprobs": [
            {p.decode("utf-8", errors="replace"): lp for p, lp in i.top} for i in items
        ],
        "text_offset": offsets,
    }


class SamplerChain:
    """Owns one ``llama_sampler`` chain; ``free()`` it exactly once (idempotent)."""

    def __init__(self, pointer: Any) -> None:
        self.pointer = pointer

    def sample(self, ctx: Any, index: int) -> int:
        """Sample (and accept) a token from output ``index`` of the last decode."""
        import llama_cpp

        token: int = llama_cpp.llama_sampler_sample(self.pointer, ctx, index)
        return token

    def free(self) -> None:
        import llama_cpp

        if self.pointer is not None:
            llama_cpp.llama_sampler_free(self.pointer)
            self.pointer = None


def build_chain(
    vocab: Any,
    n_vocab: int,
    sampling: Sampling,
    grammar: Any = None,
    *,
    param: str = "response_format",
) -> SamplerChain:
    """A sampler chain for one request. ``grammar`` is a ``llama_cpp.LlamaGrammar`` or None.

    Raises :class:`InvalidRequestError` (naming ``param``) when llama.cpp rejects the grammar.
    """
    import llama_cpp

    chain = SamplerChain(
        llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    )
    try:
        if sampling.penalized:
            _add(
                chain,
                llama_cpp.llama_sampler_init_penalties(
                    n_vocab,
                    PENALTY_LAST_N,
                    sampling.repeat_penalty,
                    sampling.frequency_penalty,
                    sampling.presence_penalty,
                ),
            )
        if grammar is not None:
            _add(chain, _grammar_sampler(vocab, grammar, param))
        if sampling.temperature <= 0.0:
            _add(chain, llama_cpp.llama_sampler_init_greedy())
            return chain
        if sampling.top_k > 0:
            _add(chain, llama_cpp.llama_sampler_init_top_k(sampling.top_k))
        if sampling.top_p < 1.0:
            _add(chain, llama_cpp.llama_sampler_init_top_p(sampling.top_p, 1))
        if sampling.min_p > 0.0:
            _add(chain, llama_cpp.llama_sampler_init_min_p(sampling.min_p, 1))
        _add(chain, llama_cpp.llama_sampler_init_temp(sampling.temperature))
        seed = sampling.seed if sampling.seed is not None else random.getrandbits(31)
        _add(chain, llama_cpp.llama_sampler_init_dist(seed & 0xFFFFFFFF))
        return chain
    except BaseException:
        chain.free()
        raise


def _grammar_sampler(vocab: Any, grammar: Any, param: str) -> Any:
    import llama_cpp

    text: str = grammar._grammar
    root: str = grammar._root
    sampler = llama_cpp.llama_sampler_init_grammar(vocab, text.encode(), root.encode())
    if not sampler:
        raise InvalidRequestError(
            "llama.cpp could not compile the grammar derived from this request",
            param=param,
        )
    return sampler


def _add(chain: SamplerChain, sampler: Any) -> None:
    import llama_cpp

    llama_cpp.llama_sampler_chain_add(chain.pointer, sampler)  # the chain owns it now
