"""How much of a request's prompt a candidate already holds in its KV cache.

A request carries its prefix chain (``RequestFacts.prefix_chain``: link hashes, each with
the characters it covers); an engine reports the links it holds
(``LiveFigures.held_prefixes``), each with its depth in the engine's own tokens. The longest
link of the chain a candidate holds is its cached prefix, and that depth is its size.

The request's size on a candidate is counted in the same tokens: the chain's characters at
the tokens per character of the held link (exact for that engine and this prompt), else at
the deployment's calibrated ``LiveFigures.tokens_per_char``, else the request's own
estimate (``RequestFacts.prompt_tokens``).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from policies.facts import Candidate, RequestFacts


class HeldPrefix(NamedTuple):
    """The longest link of a request's chain a candidate holds: its position in the chain,
    the characters it covers and the engine's token depth of it (the cached tokens)."""

    link: int
    chars: int
    tokens: int


def held_prefix(request: RequestFacts, cand: Candidate) -> HeldPrefix | None:
    """The candidate's longest held link of the request's chain, or ``None``."""
    held = cand.live.held_prefixes
    chain = request.prefix_chain
    if not held or not chain:
        return None
    get = held.get
    for index in range(len(chain) - 1, -1, -1):
        link, chars = chain[index]
        depth = get(link)
        if depth is not None:
            return HeldPrefix(index, chars, max(depth, 0))
    return None


def prompt_tokens_on(request: RequestFacts, cand: Candidate, found: HeldPrefix | None) -> int:
    """The request's prompt in the candidate's tokens (``found``: its :func:`held_prefix`)."""
    chain = request.prefix_chain
    total = chain[-1][1] if chain else 0
    if total <= 0:
        return request.prompt_tokens
    if found is not None and found.tokens > 0 and found.chars > 0:
        return max(math.ceil(total * found.tokens / found.chars), found.tokens)
    ratio = cand.live.tokens_per_char
    if ratio:
        return math.ceil(total * ratio)
    return request.prompt_tokens


def uncached_tokens(request: RequestFacts, cand: Candidate) -> int:
    """Prompt tokens the candidate has to prefill, in its own tokens."""
    found = held_prefix(request, cand)
    prompt = prompt_tokens_on(request, cand, found)
    return prompt if found is None else max(prompt - found.tokens, 0)


def cached_tokens(request: RequestFacts, cand: Candidate) -> int:
    """Prompt tokens the candidate need not prefill (0 when it holds none)."""
    found = held_prefix(request, cand)
    return 0 if found is None else found.tokens


def cached_chars(request: RequestFacts, cand: Candidate) -> int:
    """Characters of the prompt the candidate holds: comparable between candidates whose
    tokenizers differ."""
    found = held_prefix(request, cand)
    return 0 if found is None else found.chars
