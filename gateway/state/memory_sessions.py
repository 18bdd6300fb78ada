"""Session books in process memory, for :class:`~gateway.state.memory.MemoryStateStore`.

Each operation runs without awaiting, so it is atomic on the event loop. At most
``max_sessions`` sessions are kept: an idle session is forgotten ``idle_ttl_s`` after its
last request, and past the bound the least recently used goes first.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gateway.state.base import (
    BUDGET_SLACK_USD,
    SessionCaps,
    SessionHold,
    SessionUse,
    check_scope,
)


@dataclass
class _Book:
    first: float
    last: float
    idle_ttl_s: float
    usd: float = 0.0
    tokens: int = 0
    requests: int = 0
    stopped: str = ""
    info: tuple[tuple[str, str], ...] = ()
    holds: dict[str, tuple[float, int, float]] = field(default_factory=dict)
    """hold id -> (usd, tokens, lapses at)"""

    def held(self, now: float, other_than: str) -> tuple[float, int]:
        for lapsed in [h for h, (_, _, at) in self.holds.items() if at <= now]:
            del self.holds[lapsed]
        kept = [(u, t) for h, (u, t, _) in self.holds.items() if h != other_than]
        return sum(u for u, _ in kept), sum(t for _, t in kept)

    def use(self, scope: str, now: float) -> SessionUse:
        held_usd, held_tokens = self.held(now, "")
        return SessionUse(
            scope,
            self.usd,
            self.tokens,
            self.requests,
            held_usd,
            held_tokens,
            self.stopped,
            self.info,
            self.first,
            self.last,
        )


class MemorySessions:
    """Session books of one process."""

    def __init__(self, clock: Callable[[], float], max_sessions: int = 10_000) -> None:
        self._clock = clock
        self._max = max_sessions
        self._books: OrderedDict[str, _Book] = OrderedDict()

    def hold(
        self,
        scope: str,
        hold_id: str,
        cost: tuple[float, int],
        caps: SessionCaps,
        info: Sequence[tuple[str, str]],
    ) -> SessionHold:
        usd, tokens = cost
        now = self._clock()
        book = self._book(scope, now, caps.idle_ttl_s, info)
        held_usd, held_tokens = book.held(now, hold_id)
        reason = ""
        if caps.budget_usd is not None and (
            book.usd + held_usd + usd > caps.budget_usd + BUDGET_SLACK_USD
        ):
            reason = "budget"
        elif caps.max_tokens is not None and book.tokens + held_tokens + tokens > caps.max_tokens:
            reason = "tokens"
        if reason:
            book.stopped = _stop_reason(book, reason, cost, caps)
            return SessionHold(False, reason, book.use(scope, now))
        book.holds[hold_id] = (usd, tokens, now + caps.hold_ttl_s)
        book.requests += 1
        book.stopped = ""
        return SessionHold(True, "", book.use(scope, now))

    def settle(
        self, scope: str, hold_id: str, usd: float, tokens: int, idle_ttl_s: float
    ) -> SessionUse:
        now = self._clock()
        book = self._book(scope, now, idle_ttl_s, ())
        book.holds.pop(hold_id, None)
        book.usd += usd
        book.tokens += tokens
        return book.use(scope, now)

    def stop(
        self, scope: str, reason: str, idle_ttl_s: float, info: Sequence[tuple[str, str]]
    ) -> SessionUse:
        now = self._clock()
        book = self._book(scope, now, idle_ttl_s, info)
        book.stopped = reason
        return book.use(scope, now)

    def top(self, count: int) -> list[SessionUse]:
        now = self._clock()
        for scope in [s for s, b in self._books.items() if b.last + b.idle_ttl_s <= now]:
            del self._books[scope]
        books = sorted(self._books.items(), key=lambda item: item[1].usd, reverse=True)
        return [book.use(scope, now) for scope, book in books[:count]]

    def _book(
        self, scope: str, now: float, idle_ttl_s: float, info: Sequence[tuple[str, str]]
    ) -> _Book:
        book = self._books.get(check_scope(scope))
        if book is None or book.last + book.idle_ttl_s <= now:
            book = self._books[scope] = _Book(now, now, idle_ttl_s, info=tuple(info))
        book.last, book.idle_ttl_s = now, idle_ttl_s
        if info and not book.info:
            book.info = tuple(info)
        self._books.move_to_end(scope)
        while len(self._books) > self._max:
            self._books.popitem(last=False)  # the least recently used
        return book


def _stop_reason(book: _Book, reason: str, cost: tuple[float, int], caps: SessionCaps) -> str:
    """``reason`` when the session's own spend leaves no room for the request (it is
    stopped); empty when only requests in flight hold the room (it may go on after)."""
    usd, tokens = cost
    if reason == "budget" and caps.budget_usd is not None:
        return reason if book.usd + usd > caps.budget_usd + BUDGET_SLACK_USD else book.stopped
    if caps.max_tokens is not None and book.tokens + tokens > caps.max_tokens:
        return reason
    return book.stopped
