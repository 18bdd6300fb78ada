"""How much of a request's prompt a candidate already holds in its KV cache.

A request carries its prefix chain (``RequestFacts.prefix_chain``: link hashes, each with
the characters it covers); an engine reports the links it holds
(``LiveFigures.held_prefixes``). The longest link of the chain a candidate holds is its
cached prefix. Its size in tokens is the request's own token estimate scaled by the share
of characters that link covers, so that cached and uncached tokens stay in one unit.
"""

from __future__ import annotations

from typing import NamedTuple

from policies.facts import Candidate, RequestFacts


class HeldPrefix(NamedTuple):
    """The longest link of a request's chain a candidate holds: its position in the chain,
    the request's tokens it covers (estimated) and the engine's own token depth."""

    link: int
    tokens: int
    engine_tokens: int


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
            total = chain[-1][1] or 1
            tokens = min(request.prompt_tokens, request.prompt_tokens * chars // total)
            return HeldPrefix(index, tokens, depth)
    return None


def cached_tokens(request: RequestFacts, cand: Candidate) -> int:
    """Prompt tokens the candidate need not prefill (0 when it holds none)."""
    found = held_prefix(request, cand)
    return 0 if found is None else found.tokens
