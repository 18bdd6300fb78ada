"""The one interface to the gateway's shared state, and the arithmetic both stores share.

A :class:`StateStore` holds what several gateway replicas must agree on: rate-limit
counters, money spent per budget window, virtual-key records, cached responses, and a
small shared dictionary (circuit-breaker state, live latency figures). Two stores
implement it: :class:`~gateway.state.memory.MemoryStateStore` (one process) and
:class:`~gateway.state.redis.RedisStateStore` (every replica on one Redis).

Rate limits use GCRA (the generic cell rate algorithm): each limit keeps one number, its
*theoretical arrival time* (TAT). A limit of ``L`` units per ``P`` seconds lets a unit in
every ``P / L`` seconds with a burst of ``L``. Taking ``c`` units moves the TAT forward by
``c * P / L``; a reservation is refused if that would put the TAT more than ``P`` ahead
of now. Giving units back (token reconcile) moves it back. Every limit of one
reservation is checked and taken together, or none is.

A store that cannot reach its backend raises :class:`StateUnavailable`; callers decide
whether to fail open (rate limits) or closed (budgets, keys).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass


class StateUnavailable(Exception):
    """The shared store cannot be reached now; the caller picks fail-open or fail-closed."""


@dataclass(frozen=True)
class LimitCheck:
    """One limit of a reservation: ``limit`` units per ``period_s``; take ``cost`` units.

    In :meth:`StateStore.adjust`, ``cost`` is the change (negative gives units back).
    """

    name: str
    limit: int
    period_s: float
    cost: int


@dataclass(frozen=True)
class LimitState:
    """A limit as it stands after a reservation: what the ``x-ratelimit-*`` headers say."""

    name: str
    limit: int
    remaining: int
    reset_s: float


@dataclass(frozen=True)
class Reservation:
    """The outcome of :meth:`StateStore.reserve`.

    ``retry_after_s`` is set when refused and a retry can succeed; it is ``None`` when the
    reservation was allowed or when its cost is larger than a limit (it never fits).
    """

    allowed: bool
    retry_after_s: float | None
    states: tuple[LimitState, ...]


@dataclass(frozen=True)
class Spend:
    """Money spent in the current budget window; windows are aligned to the Unix epoch.

    ``held_usd`` is what requests in flight have reserved and not yet settled."""

    usd: float
    window_start: float
    window_end: float
    held_usd: float = 0.0


@dataclass(frozen=True)
class Hold:
    """The outcome of :meth:`StateStore.spend_hold`: whether the hold was placed, and the
    spend it was checked against (``held_usd`` includes it when placed)."""

    allowed: bool
    spend: Spend


@dataclass(frozen=True)
class SessionUse:
    """One session's books: what it spent and used (settled), what its requests in flight
    hold, how many requests it was let in for, and why it was last refused (``stopped``:
    ``budget``, ``tokens``, ``loop``; empty while it runs). ``info`` is what the session
    was opened with (key name, label, model), for display; ``first``/``last`` are Unix
    times."""

    scope: str
    usd: float = 0.0
    tokens: int = 0
    requests: int = 0
    held_usd: float = 0.0
    held_tokens: int = 0
    stopped: str = ""
    info: tuple[tuple[str, str], ...] = ()
    first: float = 0.0
    last: float = 0.0


@dataclass(frozen=True)
class SessionHold:
    """The outcome of :meth:`StateStore.session_hold`: placed or not, why not
    (``budget`` or ``tokens``), and the session's books it was checked against."""

    allowed: bool
    reason: str
    use: SessionUse


@dataclass(frozen=True)
class SessionCaps:
    """What a session may use in all (``None``: no cap), the hold's lifetime if its process
    dies, and how long an idle session is remembered."""

    budget_usd: float | None = None
    max_tokens: int | None = None
    hold_ttl_s: float = 900.0
    idle_ttl_s: float = 3600.0


# a budget filled to the cent by holds whose float sum rounds up still admits its last one
BUDGET_SLACK_USD = 1e-9


@dataclass
class StoreHealth:
    """Outage bookkeeping a metrics exporter can read: ``outages`` counts transitions to
    down, ``errors`` counts failed operations, ``down_since`` is a Unix time or ``None``."""

    available: bool = True
    outages: int = 0
    errors: int = 0
    down_since: float | None = None


class StateStore(ABC):
    """Shared gateway state. Scopes are strings such as ``key:<id>`` or
    ``deployment:<name>``; every key of one scope lives in one Redis Cluster slot."""

    health: StoreHealth
    shared: bool
    """Whether other processes see this store's state (False for the in-memory store)."""

    # -- rate limits ---------------------------------------------------------------------
    @abstractmethod
    async def reserve(self, scope: str, checks: Sequence[LimitCheck]) -> Reservation:
        """Atomically check every limit of ``scope`` and take ``cost`` from all, or none."""

    @abstractmethod
    async def adjust(self, scope: str, checks: Sequence[LimitCheck]) -> None:
        """Add ``cost`` (may be negative) to each limit without checking: reconcile/rollback."""

    # -- budgets -------------------------------------------------------------------------
    @abstractmethod
    async def spend_add(self, scope: str, window_s: int, usd: float) -> Spend:
        """Add ``usd`` to the current window of ``scope``; return the new total."""

    @abstractmethod
    async def spend_get(self, scope: str, window_s: int) -> Spend:
        """Money spent by ``scope`` in the current window, and what is held."""

    @abstractmethod
    async def spend_hold(
        self,
        scope: str,
        window_s: int,
        hold_id: str,
        usd: float,
        ttl_s: float,
        *,
        budget_usd: float | None = None,
    ) -> Hold:
        """Hold ``usd`` of ``scope``'s budget for a request in flight (replacing the hold
        ``hold_id`` had). With ``budget_usd``, atomically refuse instead when what is spent
        plus what other requests hold has reached it. A hold not settled lapses after
        ``ttl_s`` seconds (its process died)."""

    @abstractmethod
    async def spend_settle(self, scope: str, window_s: int, hold_id: str, usd: float) -> Spend:
        """Atomically drop the hold ``hold_id`` and add ``usd`` to the current window. A
        shared store adds it once per ``hold_id``: a settlement written again after an
        outage hid whether the first write landed is not counted twice."""

    # -- sessions ------------------------------------------------------------------------
    @abstractmethod
    async def session_hold(
        self,
        scope: str,
        hold_id: str,
        usd: float,
        tokens: int,
        caps: SessionCaps,
        info: Sequence[tuple[str, str]] = (),
    ) -> SessionHold:
        """Atomically hold ``usd`` and ``tokens`` for one request of session ``scope`` and
        count the request; or refuse (and mark the session stopped) when what it spent
        plus what its other requests hold plus this request would pass a cap. A hold not
        settled lapses after ``caps.hold_ttl_s``; the session is forgotten
        ``caps.idle_ttl_s`` after its last request."""

    @abstractmethod
    async def session_settle(
        self, scope: str, hold_id: str, usd: float, tokens: int, idle_ttl_s: float
    ) -> SessionUse:
        """Atomically drop the hold ``hold_id`` and add what the request really cost (once
        per ``hold_id`` on a shared store, as :meth:`spend_settle`)."""

    @abstractmethod
    async def session_stop(
        self, scope: str, reason: str, idle_ttl_s: float, info: Sequence[tuple[str, str]] = ()
    ) -> SessionUse:
        """Mark the session stopped for ``reason`` (until a request of it is let in)."""

    @abstractmethod
    async def session_top(self, count: int) -> list[SessionUse]:
        """Up to ``count`` remembered sessions, the biggest spenders first."""

    # -- virtual-key records (opaque JSON; the store knows no schema) ----------------------
    @abstractmethod
    async def key_put(self, key_hash: str, key_id: str, record: str) -> None:
        """Store (or replace) the record of one key, findable by hash and by id."""

    @abstractmethod
    async def key_get(self, key_hash: str) -> str | None:
        """The record whose secret hashes to ``key_hash``."""

    @abstractmethod
    async def key_find(self, key_id: str) -> tuple[str, str] | None:
        """``(key_hash, record)`` of the key with public id ``key_id``."""

    @abstractmethod
    async def key_list(self) -> list[str]:
        """Every key record, revoked ones included."""

    @abstractmethod
    async def key_count(self) -> int:
        """How many key records exist (revoked ones included)."""

    # -- response cache ------------------------------------------------------------------
    @abstractmethod
    async def cache_get(self, key: str) -> bytes | None:
        """A cached value, or ``None`` when absent or expired."""

    @abstractmethod
    async def cache_set(self, key: str, value: bytes, ttl_s: float) -> None:
        """Cache ``value`` for ``ttl_s`` seconds."""

    # -- small shared dictionary (breaker state, latency figures) -------------------------
    @abstractmethod
    async def shared_get(self, key: str) -> str | None:
        """A shared value, or ``None`` when absent or expired."""

    @abstractmethod
    async def shared_set(self, key: str, value: str, ttl_s: float) -> None:
        """Set a shared value that expires after ``ttl_s`` seconds."""

    @abstractmethod
    async def shared_incr(self, key: str, amount: int, ttl_s: float) -> int:
        """Add to a shared counter; a new counter expires ``ttl_s`` after its creation."""

    @abstractmethod
    async def shared_delete(self, key: str) -> None:
        """Remove a shared value."""

    @abstractmethod
    async def shared_size(self, key: str) -> int:
        """The size in bytes of a shared value (0 when absent), read without the value."""

    @abstractmethod
    async def shared_run(self, key: str, at: float, since: float, ttl_s: float) -> int:
        """Count one event at ``at`` in the shared run ``key`` and return the run's length.
        The run starts again (this event its first) when ``since`` is later than its last
        event: what ends a run of failures is a success after them. The run is forgotten
        ``ttl_s`` after its last event; :meth:`shared_get` reads it as ``"<length> <last>"``."""

    @abstractmethod
    async def shared_publish(self, channel: str, message: str) -> None:
        """Send ``message`` to every process listening on ``channel`` now (none: lost)."""

    @abstractmethod
    def shared_listen(self, channel: str) -> AsyncIterator[str]:
        """The messages published on ``channel`` from now on, until the caller stops
        iterating; raises :class:`StateUnavailable` when the store cannot be reached (the
        caller listens again later, and what was sent meanwhile is lost)."""

    # -- shared values under one byte bound (stored responses) --------------------------
    @abstractmethod
    async def bounded_set(
        self, group: str, key: str, value: str, ttl_s: float, max_bytes: int
    ) -> bool:
        """Set the shared value ``key`` (read with :meth:`shared_get`) for ``ttl_s`` seconds
        as a member of ``group``, whose live members together hold at most ``max_bytes``
        in this store, whichever process wrote them: the oldest members are deleted first
        to make room. False (nothing stored) when ``value`` alone is larger."""

    @abstractmethod
    async def bounded_delete(self, group: str, key: str) -> None:
        """Remove the shared value ``key`` and its bytes from ``group``'s count."""

    @abstractmethod
    async def bounded_bytes(self, group: str) -> int:
        """The bytes ``group``'s members hold, as counted against its bound."""

    # -- lifecycle -----------------------------------------------------------------------
    @abstractmethod
    async def ping(self) -> bool:
        """Whether the backend answers now (never raises)."""

    @abstractmethod
    async def aclose(self) -> None:
        """Release connections."""


def check_scope(scope: str) -> str:
    """Refuse scope names that would break Redis hash tags."""
    if not scope or any(c in scope for c in "{}\r\n "):
        raise ValueError(f"invalid state scope {scope!r}")
    return scope


# float TATs near 1.7e9 s carry ~0.2 us of rounding; allow that much slack
_EPSILON_S = 1e-6


@dataclass(frozen=True)
class _Step:
    tat: float
    new_tat: float
    allow_at: float
    never: bool


def gcra_reserve(
    tats: Sequence[float | None], checks: Sequence[LimitCheck], now: float
) -> tuple[Reservation, list[float]]:
    """GCRA over several limits at once (seconds). Returns the outcome and the TATs to
    store (unchanged when refused). The Redis Lua script implements the same steps."""
    steps = []
    for tat, check in zip(tats, checks, strict=True):
        start = now if tat is None or tat < now else tat
        interval = check.period_s / check.limit
        new_tat = start + check.cost * interval
        steps.append(_Step(start, new_tat, new_tat - check.period_s, check.cost > check.limit))
    never = any(s.never for s in steps)
    wait = max((s.allow_at - now for s in steps), default=0.0)
    allowed = not never and wait <= _EPSILON_S
    kept = [s.new_tat if allowed else s.tat for s in steps]
    states = tuple(limit_state(c, tat - now) for c, tat in zip(checks, kept, strict=True))
    retry = None if allowed or never else wait
    return Reservation(allowed, retry, states), kept


def gcra_adjust(tat: float | None, check: LimitCheck, now: float) -> float | None:
    """The TAT after adding ``check.cost`` units; ``None`` when the limit is whole again."""
    start = now if tat is None or tat < now else tat
    new_tat = start + check.cost * check.period_s / check.limit
    return new_tat if new_tat > now else None


def limit_state(check: LimitCheck, ahead_s: float) -> LimitState:
    """What is left of a limit whose TAT is ``ahead_s`` seconds in the future."""
    interval = check.period_s / check.limit
    ahead = max(0.0, ahead_s)
    remaining = max(0, min(check.limit, math.floor((check.period_s - ahead) / interval + 1e-3)))
    return LimitState(check.name, check.limit, remaining, ahead)


def window_bounds(now: float, window_s: int) -> tuple[float, float]:
    """The epoch-aligned budget window that contains ``now``."""
    start = math.floor(now / window_s) * window_s
    return float(start), float(start + window_s)
