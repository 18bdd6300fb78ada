"""In-process :class:`StateStore`: the embedded default, and the local fallback for rate
limits while Redis is down. Nothing here is shared with other processes.

Every operation runs without awaiting, so each is atomic on the event loop. Expired
entries are dropped lazily and by a sweep every few thousand writes; the response cache
keeps at most ``max_cache_entries`` (oldest evicted first).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field, replace

from gateway.state.base import (
    Hold,
    LimitCheck,
    Reservation,
    SessionCaps,
    SessionHold,
    SessionUse,
    Spend,
    StateStore,
    StoreHealth,
    check_scope,
    gcra_adjust,
    gcra_reserve,
    window_bounds,
)
from gateway.state.memory_sessions import MemorySessions

_SWEEP_EVERY = 4096


@dataclass
class _Expiring:
    value: float | str | bytes
    expires_at: float


@dataclass
class _Group:
    """The members of one byte-bounded group, oldest first: ``key -> (bytes, expires_at)``."""

    entries: OrderedDict[str, tuple[int, float]] = field(default_factory=OrderedDict)
    bytes: int = 0

    def add(self, key: str, size: int, expires_at: float) -> None:
        self.entries[key] = (size, expires_at)
        self.bytes += size

    def drop(self, key: str) -> None:
        entry = self.entries.pop(key, None)
        if entry is not None:
            self.bytes -= entry[0]


class MemoryStateStore(StateStore):
    """A :class:`StateStore` in this process's memory; ``clock`` returns Unix seconds."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        max_cache_entries: int = 10_000,
        max_sessions: int = 10_000,
    ) -> None:
        self.health = StoreHealth()
        self.shared = False
        self._clock = clock
        self._max_cache = max_cache_entries
        self._tats: dict[str, float] = {}
        self._spend: dict[str, tuple[float, float]] = {}
        self._holds: dict[str, dict[str, _Expiring]] = {}
        self._keys: dict[str, str] = {}
        self._ids: dict[str, str] = {}
        self._cache: OrderedDict[str, _Expiring] = OrderedDict()
        self._shared: dict[str, _Expiring] = {}
        self._groups: dict[str, _Group] = {}
        self._listeners: dict[str, set[asyncio.Queue[str]]] = {}
        self._writes = 0
        self._sessions = MemorySessions(clock, max_sessions)

    async def reserve(self, scope: str, checks: Sequence[LimitCheck]) -> Reservation:
        now = self._clock()
        names = [_limit_key(scope, c) for c in checks]
        outcome, tats = gcra_reserve([self._live_tat(n, now) for n in names], checks, now)
        if outcome.allowed:
            self._tats.update(zip(names, tats, strict=True))
            self._wrote()
        return outcome

    async def adjust(self, scope: str, checks: Sequence[LimitCheck]) -> None:
        now = self._clock()
        for check in checks:
            name = _limit_key(scope, check)
            tat = gcra_adjust(self._live_tat(name, now), check, now)
            if tat is None:
                self._tats.pop(name, None)
            else:
                self._tats[name] = tat

    async def spend_add(self, scope: str, window_s: int, usd: float) -> Spend:
        return await self.spend_settle(scope, window_s, "", usd)

    async def spend_get(self, scope: str, window_s: int) -> Spend:
        return self._spend_now(scope, window_s, "")

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
        spend = self._spend_now(scope, window_s, hold_id)
        if budget_usd is not None and spend.usd + spend.held_usd >= budget_usd:
            return Hold(False, spend)
        holds = self._holds.setdefault(check_scope(scope), {})
        holds[hold_id] = _Expiring(usd, self._clock() + ttl_s)
        self._wrote()
        return Hold(True, replace(spend, held_usd=spend.held_usd + usd))

    async def spend_settle(self, scope: str, window_s: int, hold_id: str, usd: float) -> Spend:
        spend = self._spend_now(scope, window_s, hold_id)
        holds = self._holds.get(scope)
        if holds is not None:
            holds.pop(hold_id, None)
            if not holds:
                del self._holds[scope]
        if usd:
            total = spend.usd + usd
            self._spend[_spend_key(scope, window_s)] = (spend.window_start, total)
            spend = replace(spend, usd=total)
        return spend

    def _spend_now(self, scope: str, window_s: int, hold_id: str) -> Spend:
        """The window's spend, and what holds other than ``hold_id`` keep (lapsed ones
        dropped)."""
        now = self._clock()
        start, end = window_bounds(now, window_s)
        window, total = self._spend.get(_spend_key(scope, window_s), (start, 0.0))
        holds = self._live_holds(scope, now)
        held = sum(float(e.value) for h, e in holds.items() if h != hold_id)
        return Spend(total if window == start else 0.0, start, end, held)

    def _live_holds(self, scope: str, now: float) -> dict[str, _Expiring]:
        holds = self._holds.get(scope)
        if holds is None:
            return {}
        for lapsed in [h for h, e in holds.items() if e.expires_at <= now]:
            del holds[lapsed]
        if not holds:
            del self._holds[scope]
        return holds

    async def session_hold(
        self,
        scope: str,
        hold_id: str,
        usd: float,
        tokens: int,
        caps: SessionCaps,
        info: Sequence[tuple[str, str]] = (),
    ) -> SessionHold:
        return self._sessions.hold(scope, hold_id, (usd, tokens), caps, info)

    async def session_settle(
        self, scope: str, hold_id: str, usd: float, tokens: int, idle_ttl_s: float
    ) -> SessionUse:
        return self._sessions.settle(scope, hold_id, usd, tokens, idle_ttl_s)

    async def session_stop(
        self, scope: str, reason: str, idle_ttl_s: float, info: Sequence[tuple[str, str]] = ()
    ) -> SessionUse:
        return self._sessions.stop(scope, reason, idle_ttl_s, info)

    async def session_top(self, count: int) -> list[SessionUse]:
        return self._sessions.top(count)

    async def key_put(self, key_hash: str, key_id: str, record: str) -> None:
        self._keys[key_hash] = record
        self._ids[key_id] = key_hash

    async def key_get(self, key_hash: str) -> str | None:
        return self._keys.get(key_hash)

    async def key_find(self, key_id: str) -> tuple[str, str] | None:
        key_hash = self._ids.get(key_id)
        if key_hash is None or key_hash not in self._keys:
            return None
        return key_hash, self._keys[key_hash]

    async def key_list(self) -> list[str]:
        return [self._keys[h] for h in self._ids.values() if h in self._keys]

    async def key_count(self) -> int:
        return len(self._keys)

    async def cache_get(self, key: str) -> bytes | None:
        entry = self._cache.get(key)
        if entry is None or entry.expires_at <= self._clock():
            self._cache.pop(key, None)
            return None
        assert isinstance(entry.value, bytes)
        return entry.value

    async def cache_set(self, key: str, value: bytes, ttl_s: float) -> None:
        self._cache.pop(key, None)
        self._cache[key] = _Expiring(value, self._clock() + ttl_s)
        while len(self._cache) > self._max_cache:
            self._cache.popitem(last=False)
        self._wrote()

    async def shared_get(self, key: str) -> str | None:
        entry = self._live_shared(key)
        return None if entry is None else str(entry.value)

    async def shared_set(self, key: str, value: str, ttl_s: float) -> None:
        self._shared[key] = _Expiring(value, self._clock() + ttl_s)
        self._wrote()

    async def shared_incr(self, key: str, amount: int, ttl_s: float) -> int:
        entry = self._live_shared(key)
        if entry is None:
            entry = self._shared[key] = _Expiring("0", self._clock() + ttl_s)
        total = int(entry.value) + amount
        entry.value = str(total)
        self._wrote()
        return total

    async def shared_delete(self, key: str) -> None:
        self._shared.pop(key, None)

    async def shared_size(self, key: str) -> int:
        entry = self._live_shared(key)
        return 0 if entry is None else len(str(entry.value).encode())

    async def shared_run(self, key: str, at: float, since: float, ttl_s: float) -> int:
        entry = self._live_shared(key)
        length, last = _run(None if entry is None else str(entry.value))
        length = 1 if since > last else length + 1
        self._shared[key] = _Expiring(f"{length} {at!r}", self._clock() + ttl_s)
        self._wrote()
        return length

    async def shared_publish(self, channel: str, message: str) -> None:
        for queue in self._listeners.get(channel, ()):
            queue.put_nowait(message)

    async def shared_listen(self, channel: str) -> AsyncIterator[str]:
        queue: asyncio.Queue[str] = asyncio.Queue()
        listeners = self._listeners.setdefault(channel, set())
        listeners.add(queue)
        try:
            while True:
                yield await queue.get()
        finally:
            listeners.discard(queue)
            if not listeners:
                del self._listeners[channel]

    async def bounded_set(
        self, group: str, key: str, value: str, ttl_s: float, max_bytes: int
    ) -> bool:
        size = len(value.encode())
        members = self._groups.setdefault(group, _Group())
        members.drop(key)
        if size > max_bytes:
            return False
        now = self._clock()
        while members.entries:
            oldest, (_, expires_at) = next(iter(members.entries.items()))
            if expires_at > now and members.bytes + size <= max_bytes:
                break
            members.drop(oldest)
            self._shared.pop(oldest, None)
        members.add(key, size, now + ttl_s)
        await self.shared_set(key, value, ttl_s)
        return True

    async def bounded_delete(self, group: str, key: str) -> None:
        members = self._groups.get(group)
        if members is not None:
            members.drop(key)
        self._shared.pop(key, None)

    async def bounded_bytes(self, group: str) -> int:
        members = self._groups.get(group)
        return 0 if members is None else members.bytes

    async def ping(self) -> bool:
        return True

    async def aclose(self) -> None:
        return None

    def _live_tat(self, name: str, now: float) -> float | None:
        tat = self._tats.get(name)
        if tat is not None and tat <= now:
            del self._tats[name]
            return None
        return tat

    def _live_shared(self, key: str) -> _Expiring | None:
        entry = self._shared.get(key)
        if entry is not None and entry.expires_at <= self._clock():
            del self._shared[key]
            return None
        return entry

    def _wrote(self) -> None:
        self._writes += 1
        if self._writes % _SWEEP_EVERY == 0:
            self._sweep()

    def _sweep(self) -> None:
        now = self._clock()
        self._tats = {k: t for k, t in self._tats.items() if t > now}
        self._shared = {k: e for k, e in self._shared.items() if e.expires_at > now}
        for scope in list(self._holds):
            self._live_holds(scope, now)
        for key in [k for k, e in self._cache.items() if e.expires_at <= now]:
            del self._cache[key]


def _run(raw: str | None) -> tuple[int, float]:
    """A shared run's length and last event (none: ``0, -inf``)."""
    if raw is None:
        return 0, -float("inf")
    length, last = raw.split(" ")
    return int(length), float(last)


def _spend_key(scope: str, window_s: int) -> str:
    return f"{check_scope(scope)}:spend:{window_s}"


def _limit_key(scope: str, check: LimitCheck) -> str:
    return f"{check_scope(scope)}:{check.name}"
