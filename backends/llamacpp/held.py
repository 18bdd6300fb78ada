"""Which prefix links each sequence's KV holds, for routing to report.

A job may carry its request's prefix chain (``gateway.protocol.prefix``: link hashes, each
with the characters of canonical content it covers). When the scheduler fills a sequence
with a job's prompt, the sequence holds that chain; each link's depth in tokens is the
prompt's token count scaled by the share of characters the link covers. When the sequence's
KV is trimmed to ``keep`` tokens, only links no deeper than ``keep`` stay; cleared, none.
:meth:`HeldChains.report` is every sequence's links together (the deepest depth of each),
bounded by :data:`HELD_MAX`, rebuilt only after a change.

The scheduler thread writes; any thread may read the report: each sequence's links are an
immutable tuple replaced whole, and a report built while they changed is rebuilt next time.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

HELD_MAX = 2048
"""Links reported at most, all sequences together."""

Link = tuple[str, int]


class HeldChains:
    """Per sequence, the held links as (hash, depth in tokens), shallowest first."""

    def __init__(self, sequences: int, limit: int = HELD_MAX) -> None:
        self._links: list[tuple[Link, ...]] = [()] * sequences
        self._used = [0] * sequences  # when each was last filled, as a counter
        self._limit = limit
        self._version = 0
        self._report: tuple[int, dict[str, int]] = (0, {})

    def fill(self, seq_id: int, chain: Sequence[Link], n_tokens: int) -> None:
        """The sequence now holds a prompt of ``n_tokens`` with this chain (by characters);
        an empty chain leaves what the sequence held (already trimmed to the kept tokens)."""
        if not chain:
            return
        total = chain[-1][1] or 1
        self._links[seq_id] = tuple((link, n_tokens * chars // total) for link, chars in chain)
        self._version += 1
        self._used[seq_id] = self._version

    def trim(self, seq_id: int, keep: int) -> None:
        """The sequence's KV now holds its first ``keep`` tokens only."""
        links = self._links[seq_id]
        if not links or links[-1][1] <= keep:
            return
        self._links[seq_id] = links[: bisect_right(links, keep, key=_depth)]
        self._version += 1

    def copy(self, source: int, target: int) -> None:
        """``target``'s KV became a copy of ``source``'s."""
        self._links[target] = self._links[source]
        self._version += 1
        self._used[target] = self._version

    def links(self, seq_id: int) -> tuple[Link, ...]:
        """The links the sequence holds, shallowest first."""
        return self._links[seq_id]

    def assign(self, seq_id: int, links: Sequence[Link]) -> None:
        """The sequence now holds ``links`` (hash, depth in tokens): a state moved in."""
        self._links[seq_id] = tuple(sorted(links, key=_depth))
        self._version += 1
        self._used[seq_id] = self._version

    def owners(self, chain: Sequence[Link], shared: int) -> set[int]:
        """The sequences holding a link of ``chain`` past its first ``shared`` links: the
        ones holding this conversation (not just the start many conversations share)."""
        own = {link for link, _ in chain[shared:]}
        return {i for i, links in enumerate(self._links) if any(h in own for h, _ in links)}

    def sequences(self) -> tuple[Link, ...]:
        """Each sequence holding links: its deepest link, most recently filled first."""
        links, used = list(self._links), list(self._used)
        order = sorted(range(len(links)), key=lambda i: -used[i])
        return tuple(links[i][-1] for i in order if links[i])

    def report(self) -> dict[str, int]:
        """Every held link with its deepest depth in tokens, at most ``limit`` of them; the
        same object while nothing changed."""
        version = self._version
        if self._report[0] == version:
            return self._report[1]
        chains = list(self._links)
        if sum(map(len, chains)) > self._limit:
            share = max(2, self._limit // max(len(chains), 1))
            chains = [c if len(c) <= share else c[: share // 2] + c[-(share - share // 2) :]
                      for c in chains]  # fmt: skip
        held: dict[str, int] = {}
        for links in chains:
            for link, depth in links:
                if held.get(link, -1) < depth:
                    held[link] = depth
        self._report = version, held
        return held


def _depth(link: Link) -> int:
    return link[1]
