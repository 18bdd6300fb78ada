"""What the gateway just sent where: prefix links an engine will hold before it says so.

An engine reports the prefix links its KV holds (``LiveStats.held_prefixes``), a remote
one once a poll (every second or so). Between reports, a burst of turns of one conversation
would be routed as if the first of them had not been sent. So each deployment's tracker
records the chain of every request it sends there, for :data:`SENT_TTL_S` (time for the
next report to include it), and routing reads the engine's report with these on top.

The links sent also know the characters they cover: where the engine reports one, its
depth over those characters is the engine's tokens per character (:meth:`calibrate`), and
a sent link's depth is its characters at that ratio (before any report: the request's
estimated tokens scaled by the share of characters).
"""

from __future__ import annotations

import statistics
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence

SENT_TTL_S = 3.0
"""How long a sent request's links count as held without the engine's word."""

SENT_MAX = 8192
"""Links remembered per deployment at most (the oldest go first)."""


class SentPrefixes:
    """Links of requests sent recently, with the characters they cover and their depth in
    estimated tokens."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._links: OrderedDict[str, tuple[float, int, int]] = OrderedDict()
        self.version = 0
        """Changes whenever the links do (a figures cache compares it)."""

    def record(self, chain: Sequence[tuple[str, int]], prompt_tokens: int) -> None:
        """A request with this chain (links and the characters each covers) was sent."""
        if not chain:
            return
        self.expire()
        until, total = self._clock() + SENT_TTL_S, chain[-1][1] or 1
        links = self._links
        for link, chars in chain:
            links[link] = until, prompt_tokens * chars // total, chars
            links.move_to_end(link)
        while len(links) > SENT_MAX:
            links.popitem(last=False)
        self.version += 1

    def expire(self) -> None:
        """Forget links older than :data:`SENT_TTL_S`."""
        links, now = self._links, self._clock()
        dropped = False
        while links:
            first = next(iter(links))
            if links[first][0] > now:
                break
            links.popitem(last=False)
            dropped = True
        if dropped:
            self.version += 1

    def calibrate(self, reported: Mapping[str, int]) -> float | None:
        """The engine's tokens per character: the median of depth ÷ characters over the
        sent links it reports; ``None`` where it reports none of them."""
        if not reported or not self._links:
            return None
        get = reported.get
        ratios = [
            depth / chars
            for link, (_, _, chars) in self._links.items()
            if chars > 0 and (depth := get(link)) is not None and depth > 0
        ]
        return statistics.median(ratios) if ratios else None

    def over(
        self, reported: Mapping[str, int], tokens_per_char: float | None = None
    ) -> Mapping[str, int]:
        """The engine's ``reported`` links with these on top (``reported`` itself while
        nothing was sent recently); a sent link is ``tokens_per_char`` tokens a character
        deep where that is known."""
        if not self._links:
            return reported
        return _Overlay(self._links, reported, tokens_per_char)


class _Overlay(Mapping[str, int]):
    """A read-only view: a link is held if reported or recently sent, at the deeper depth."""

    __slots__ = ("_ratio", "_reported", "_sent")

    def __init__(
        self,
        sent: Mapping[str, tuple[float, int, int]],
        reported: Mapping[str, int],
        ratio: float | None,
    ) -> None:
        self._sent = sent
        self._reported = reported
        self._ratio = ratio

    def __getitem__(self, link: str) -> int:
        sent = self._sent.get(link)
        if sent is None:
            return self._reported[link]
        depth = sent[1] if self._ratio is None else int(sent[2] * self._ratio)
        return max(depth, self._reported.get(link, 0))

    def __iter__(self) -> Iterator[str]:
        yield from self._reported
        yield from (link for link in self._sent if link not in self._reported)

    def __len__(self) -> int:
        return len(self._reported) + sum(1 for link in self._sent if link not in self._reported)
