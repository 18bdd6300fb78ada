"""Redis :class:`StateStore` (redis-py asyncio), shared by every gateway replica.

* One Lua script per atomic operation; scripts read the clock with ``redis.call('TIME')``
  so replicas with skewed clocks still agree.
* Redis Cluster safe: every script touches the keys of one scope only, and a scope's keys
  share a hash tag (``shunter:{key:abc}:requests``, ``shunter:{key:abc}:tokens``), so one slot.
  Key records all live under the ``{keys}`` tag.
* Short socket timeouts and at most one immediate retry. When Redis fails, the store is
  marked down: it logs one warning per outage, counts it in :attr:`health`, raises
  :class:`StateUnavailable` at once (no network wait) until ``probe_interval_s`` has
  passed, then tries again; the first success logs the recovery. redis-py reconnects by
  itself, and reloads scripts that a restarted server forgot.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

import structlog
from redis.exceptions import (
    ClusterDownError,
    ConnectionError,
    ReadOnlyError,
    RedisClusterException,
    TimeoutError,
    TryAgainError,
)

from gateway.state.base import (
    Hold,
    LimitCheck,
    Reservation,
    SessionCaps,
    SessionHold,
    SessionUse,
    Spend,
    StateStore,
    StateUnavailable,
    StoreHealth,
    check_scope,
    limit_state,
)
from gateway.state.bounded import BOUNDED_DROP, BOUNDED_SET
from gateway.state.redis_client import Client, connect
from gateway.state.redis_sessions import RedisSessions
from gateway.state.redis_shared import SHARED_INCR, SHARED_RUN, listen

T = TypeVar("T")
# how long a settled hold id is remembered, so that a settlement retried within that time
# (after an outage hid whether the first write landed) is counted once: longer than the
# gateway retries one (a hold's 15-minute lifetime)
SETTLED_KEEP_MS = 20 * 60 * 1000
log = structlog.get_logger("shunter.state")

_OUTAGE = (
    ConnectionError,
    TimeoutError,
    ClusterDownError,
    TryAgainError,
    ReadOnlyError,
    RedisClusterException,
    OSError,
    # redis-py's Cluster client closes the connections of a node that failed while other
    # commands still hold them: those fail inside the transport (uvloop: RuntimeError
    # "handler is closed"; asyncio: AttributeError on the writer it dropped), which is
    # the same outage
    RuntimeError,
    AttributeError,
)

_NOW_US = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
"""

# KEYS: one TAT per limit (one slot). ARGV: limit, period_us, cost for each key.
# Returns {allowed, wait_us, never, ahead_us...}; numbers as strings to keep fractions.
RESERVE = (
    _NOW_US
    + """
local old, new = {}, {}
local wait, never = 0, 0
for i = 1, #KEYS do
  local limit = tonumber(ARGV[3 * i - 2])
  local period = tonumber(ARGV[3 * i - 1])
  local cost = tonumber(ARGV[3 * i])
  local tat = tonumber(redis.call('GET', KEYS[i]))
  if tat == nil or tat < now then tat = now end
  old[i] = tat
  new[i] = tat + cost * period / limit
  if cost > limit then never = 1 end
  if new[i] - period - now > wait then wait = new[i] - period - now end
end
local allowed = 0
if never == 0 and wait <= 1 then allowed = 1 end
local out = {tostring(allowed), string.format('%.17g', wait), tostring(never)}
for i = 1, #KEYS do
  local tat = old[i]
  if allowed == 1 then
    tat = new[i]
    local ttl = math.ceil((tat - now) / 1000) + 1
    redis.call('SET', KEYS[i], string.format('%.17g', tat), 'PX', string.format('%.0f', ttl))
  end
  out[#out + 1] = string.format('%.17g', tat - now)
end
return out
"""
)

# KEYS: TATs. ARGV: limit, period_us, delta for each key. No check: reconcile/rollback.
ADJUST = (
    _NOW_US
    + """
for i = 1, #KEYS do
  local limit = tonumber(ARGV[3 * i - 2])
  local period = tonumber(ARGV[3 * i - 1])
  local tat = tonumber(redis.call('GET', KEYS[i]))
  if tat == nil or tat < now then tat = now end
  tat = tat + tonumber(ARGV[3 * i]) * period / limit
  if tat <= now then
    redis.call('DEL', KEYS[i])
  else
    local ttl = math.ceil((tat - now) / 1000) + 1
    redis.call('SET', KEYS[i], string.format('%.17g', tat), 'PX', string.format('%.0f', ttl))
  end
end
return 1
"""
)

# KEYS: spend hash {start, usd}; holds hash {id: usd}; holds' lapse times (zset, us);
# settled hold ids (zset, us). ARGV: window_s, usd to add, hold id ('' none), hold usd
# ('' drops it: a settlement), hold ttl_ms (a settlement: how long its id is remembered),
# budget ('' unchecked). Returns {allowed, spent, window start, held}. A settlement whose
# id was settled already adds nothing: a retried write whose answer was lost counts once.
SPEND = (
    _NOW_US
    + """
local w = tonumber(ARGV[1])
local s = string.format('%.0f', math.floor(tonumber(t[1]) / w) * w)
local spent = 0
if redis.call('HGET', KEYS[1], 'start') == s then
  spent = tonumber(redis.call('HGET', KEYS[1], 'usd'))
end
local lapsed = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
for _, id in ipairs(lapsed) do redis.call('HDEL', KEYS[2], id) end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local held, id = 0, ARGV[3]
local holds = redis.call('HGETALL', KEYS[2])
for i = 1, #holds, 2 do
  if holds[i] ~= id then held = held + tonumber(holds[i + 1]) end
end
local function out(allowed)
  return {allowed, string.format('%.17g', spent), s, string.format('%.17g', held)}
end
if ARGV[6] ~= '' and spent + held >= tonumber(ARGV[6]) then return out('0') end
if id ~= '' and ARGV[4] == '' then
  redis.call('HDEL', KEYS[2], id)
  redis.call('ZREM', KEYS[3], id)
  if redis.call('ZSCORE', KEYS[4], id) then return out('1') end
  local keep = tonumber(ARGV[5])
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now - keep * 1000)
  redis.call('ZADD', KEYS[4], now, id)
  redis.call('PEXPIRE', KEYS[4], keep)
elseif id ~= '' then
  redis.call('HSET', KEYS[2], id, ARGV[4])
  redis.call('ZADD', KEYS[3], now + tonumber(ARGV[5]) * 1000, id)
  redis.call('PEXPIRE', KEYS[2], ARGV[5])
  redis.call('PEXPIRE', KEYS[3], ARGV[5])
  held = held + tonumber(ARGV[4])
end
if tonumber(ARGV[2]) ~= 0 then
  if redis.call('HGET', KEYS[1], 'start') ~= s then
    redis.call('HSET', KEYS[1], 'start', s, 'usd', '0')
  end
  spent = tonumber(redis.call('HINCRBYFLOAT', KEYS[1], 'usd', ARGV[2]))
  redis.call('EXPIRE', KEYS[1], string.format('%.0f', 2 * w))
end
return out('1')
"""
)

# KEYS: record by hash, id -> hash, set of ids (all under the {keys} tag).
KEY_PUT = """
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2])
redis.call('SADD', KEYS[3], ARGV[3])
return 1
"""


class RedisStateStore(StateStore):
    """A :class:`StateStore` on Redis. ``prefix`` namespaces every key (tests use it)."""

    def __init__(
        self,
        client: Client,
        *,
        prefix: str = "shunter",
        probe_interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.health = StoreHealth()
        self.shared = True
        self._client = client
        self._prefix = prefix
        self._probe_interval = probe_interval_s
        self._clock = clock
        self._retry_at = 0.0
        self._reserve = client.register_script(RESERVE)
        self._adjust = client.register_script(ADJUST)
        self._spend = client.register_script(SPEND)
        self._key_put = client.register_script(KEY_PUT)
        self._incr = client.register_script(SHARED_INCR)
        self._run_script = client.register_script(SHARED_RUN)
        self._sessions = RedisSessions(client, prefix, self._run)
        self._bounded_set = client.register_script(BOUNDED_SET)
        self._bounded_drop = client.register_script(BOUNDED_DROP)

    @classmethod
    def from_url(cls, url: str, *, cluster: bool = False, **kwargs: Any) -> RedisStateStore:
        """Connect lazily (nothing is sent until the first operation)."""
        return cls(connect(url, cluster=cluster), **kwargs)

    async def reserve(self, scope: str, checks: Sequence[LimitCheck]) -> Reservation:
        keys = [self._limit_key(scope, c) for c in checks]
        args = [a for c in checks for a in (c.limit, round(c.period_s * 1e6), c.cost)]
        raw: list[bytes] = await self._run(lambda: self._reserve(keys, args))
        allowed, never = raw[0] == b"1", raw[2] == b"1"
        wait_s = float(raw[1]) / 1e6
        states = tuple(limit_state(c, float(a) / 1e6) for c, a in zip(checks, raw[3:], strict=True))
        retry = None if allowed or never else max(wait_s, 1e-3)
        return Reservation(allowed, retry, states)

    async def adjust(self, scope: str, checks: Sequence[LimitCheck]) -> None:
        keys = [self._limit_key(scope, c) for c in checks]
        args = [a for c in checks for a in (c.limit, round(c.period_s * 1e6), c.cost)]
        await self._run(lambda: self._adjust(keys, args))

    async def spend_add(self, scope: str, window_s: int, usd: float) -> Spend:
        return (await self._spend_call(scope, window_s, add=usd)).spend

    async def spend_get(self, scope: str, window_s: int) -> Spend:
        return (await self._spend_call(scope, window_s)).spend

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
        ttl_ms = max(1, round(ttl_s * 1000))
        hold = (hold_id, repr(usd), str(ttl_ms), "" if budget_usd is None else repr(budget_usd))
        return await self._spend_call(scope, window_s, hold=hold)

    async def spend_settle(self, scope: str, window_s: int, hold_id: str, usd: float) -> Spend:
        hold = (hold_id, "", str(SETTLED_KEEP_MS), "")
        return (await self._spend_call(scope, window_s, add=usd, hold=hold)).spend

    async def session_hold(
        self,
        scope: str,
        hold_id: str,
        usd: float,
        tokens: int,
        caps: SessionCaps,
        info: Sequence[tuple[str, str]] = (),
    ) -> SessionHold:
        return await self._sessions.call(scope, "hold", (hold_id, usd, tokens, caps, ""), info)

    async def session_settle(
        self, scope: str, hold_id: str, usd: float, tokens: int, idle_ttl_s: float
    ) -> SessionUse:
        caps = SessionCaps(hold_ttl_s=SETTLED_KEEP_MS / 1000, idle_ttl_s=idle_ttl_s)
        return (await self._sessions.call(scope, "settle", (hold_id, usd, tokens, caps, ""))).use

    async def session_stop(
        self, scope: str, reason: str, idle_ttl_s: float, info: Sequence[tuple[str, str]] = ()
    ) -> SessionUse:
        caps = SessionCaps(idle_ttl_s=idle_ttl_s)
        return (await self._sessions.call(scope, "stop", ("", 0.0, 0, caps, reason), info)).use

    async def session_top(self, count: int) -> list[SessionUse]:
        return await self._sessions.top(count)

    async def key_put(self, key_hash: str, key_id: str, record: str) -> None:
        keys = [self._record_key(key_hash), self._id_key(key_id), self._ids_key()]
        await self._run(lambda: self._key_put(keys, [record, key_hash, key_id]))

    async def key_get(self, key_hash: str) -> str | None:
        raw = await self._run(lambda: self._client.get(self._record_key(key_hash)))
        return _text(raw)

    async def key_find(self, key_id: str) -> tuple[str, str] | None:
        key_hash = _text(await self._run(lambda: self._client.get(self._id_key(key_id))))
        if key_hash is None:
            return None
        record = await self.key_get(key_hash)
        return None if record is None else (key_hash, record)

    async def key_list(self) -> list[str]:
        ids = sorted(await self._run(lambda: self._client.smembers(self._ids_key())))
        if not ids:
            return []
        hashes = await self._run(lambda: self._client.mget([self._id_key(_str(i)) for i in ids]))
        rec_keys = [self._record_key(_str(h)) for h in hashes if h is not None]
        records = await self._run(lambda: self._client.mget(rec_keys)) if rec_keys else []
        return [_str(r) for r in records if r is not None]

    async def key_count(self) -> int:
        count: int = await self._run(lambda: self._client.scard(self._ids_key()))
        return count

    async def cache_get(self, key: str) -> bytes | None:
        raw = await self._run(lambda: self._client.get(f"{self._prefix}:cache:{key}"))
        return raw.encode() if isinstance(raw, str) else raw

    async def cache_set(self, key: str, value: bytes, ttl_s: float) -> None:
        ttl_ms = max(1, round(ttl_s * 1000))
        await self._run(lambda: self._client.set(f"{self._prefix}:cache:{key}", value, px=ttl_ms))

    async def shared_get(self, key: str) -> str | None:
        return _text(await self._run(lambda: self._client.get(self._shared_key(key))))

    async def shared_set(self, key: str, value: str, ttl_s: float) -> None:
        ttl_ms = max(1, round(ttl_s * 1000))
        await self._run(lambda: self._client.set(self._shared_key(key), value, px=ttl_ms))

    async def shared_incr(self, key: str, amount: int, ttl_s: float) -> int:
        ttl_ms = max(1, round(ttl_s * 1000))
        keys = [self._shared_key(key)]
        value = await self._run(lambda: self._incr(keys, [amount, ttl_ms]))
        return int(value)

    async def shared_delete(self, key: str) -> None:
        await self._run(lambda: self._client.delete(self._shared_key(key)))

    async def shared_size(self, key: str) -> int:
        return int(await self._run(lambda: self._client.strlen(self._shared_key(key))))

    async def shared_run(self, key: str, at: float, since: float, ttl_s: float) -> int:
        keys = [self._shared_key(key)]
        args: list[str | int] = [repr(at), repr(since), max(1, round(ttl_s * 1000))]
        return int(await self._run(lambda: self._run_script(keys, args)))

    async def shared_publish(self, channel: str, message: str) -> None:
        await self._run(lambda: self._client.publish(self._channel(channel), message))

    def shared_listen(self, channel: str) -> AsyncIterator[str]:
        return listen(self._client, self._channel(channel), self._run)

    async def bounded_set(
        self, group: str, key: str, value: str, ttl_s: float, max_bytes: int
    ) -> bool:
        size = len(value.encode())
        if size > max_bytes:
            await self.bounded_delete(group, key)
            return False
        ttl_ms = max(1, round(ttl_s * 1000))
        keys = self._group_keys(group)
        args: list[str | int] = [key, size, ttl_ms, max_bytes]
        evicted: list[bytes] = await self._run(lambda: self._bounded_set(keys, args))
        # before the new value, so that Redis never holds more than the bound; one key a
        # command, as each may live in another Cluster slot
        for member in evicted:
            doomed = self._shared_key(_str(member))
            await self._run(lambda: self._client.delete(doomed))  # noqa: B023 - awaited now
        await self.shared_set(key, value, ttl_s)
        return True

    async def bounded_delete(self, group: str, key: str) -> None:
        keys = self._group_keys(group)
        await self._run(lambda: self._bounded_drop(keys, [key]))
        await self.shared_delete(key)

    async def bounded_bytes(self, group: str) -> int:
        keys = self._group_keys(group)
        return int(await self._run(lambda: self._bounded_drop(keys, [""])))

    async def ping(self) -> bool:
        try:
            await self._run(lambda: self._client.ping())
        except StateUnavailable:
            return False
        return True

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _spend_call(
        self,
        scope: str,
        window_s: int,
        *,
        add: float = 0.0,
        hold: tuple[str, str, str, str] = ("", "", "0", ""),
    ) -> Hold:
        """One run of :data:`SPEND`; ``hold`` is (id, usd or '' to drop, ttl_ms, budget)."""
        tag = f"{self._prefix}:{{{check_scope(scope)}}}"
        keys = [f"{tag}:spend:{window_s}", f"{tag}:holds", f"{tag}:holds:lapse", f"{tag}:settled"]
        args = [str(window_s), repr(add), *hold]
        raw: list[bytes] = await self._run(lambda: self._spend(keys, args))
        start = float(raw[2])
        spend = Spend(float(raw[1]), start, start + window_s, float(raw[3]))
        return Hold(raw[0] == b"1", spend)

    async def _run(self, operation: Callable[[], Awaitable[T]]) -> T:
        """Run one Redis operation, mapping outages to :class:`StateUnavailable`."""
        if not self.health.available and self._clock() < self._retry_at:
            raise StateUnavailable("redis is down; waiting before the next try")
        try:
            result = await operation()
        except _OUTAGE as exc:
            self._mark_down(exc)
            raise StateUnavailable(f"redis unavailable: {type(exc).__name__}: {exc}") from exc
        if not self.health.available:
            self._mark_up()
        return result

    def _mark_down(self, exc: BaseException) -> None:
        self.health.errors += 1
        self._retry_at = self._clock() + self._probe_interval
        if self.health.available:
            self.health.available = False
            self.health.outages += 1
            self.health.down_since = time.time()
            log.warning(
                "state_store_unavailable",
                store="redis",
                error=f"{type(exc).__name__}: {exc}",
                fallback="rate limits use local counters; budgets refuse requests",
            )

    def _mark_up(self) -> None:
        down_for = time.time() - (self.health.down_since or time.time())
        self.health.available = True
        self.health.down_since = None
        log.info("state_store_recovered", store="redis", down_s=round(down_for, 3))

    def _limit_key(self, scope: str, check: LimitCheck) -> str:
        return f"{self._prefix}:{{{check_scope(scope)}}}:{check.name}"

    def _record_key(self, key_hash: str) -> str:
        return f"{self._prefix}:{{keys}}:hash:{key_hash}"

    def _id_key(self, key_id: str) -> str:
        return f"{self._prefix}:{{keys}}:id:{key_id}"

    def _ids_key(self) -> str:
        return f"{self._prefix}:{{keys}}:ids"

    def _shared_key(self, key: str) -> str:
        return f"{self._prefix}:shared:{key}"

    def _channel(self, channel: str) -> str:
        return f"{self._prefix}:notices:{channel}"

    def _group_keys(self, group: str) -> list[str]:
        tag = f"{self._prefix}:{{bounded:{check_scope(group)}}}"
        return [f"{tag}:order", f"{tag}:lapse", f"{tag}:sizes", f"{tag}:bytes"]


def _text(raw: bytes | str | None) -> str | None:
    return None if raw is None else _str(raw)


def _str(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw
