"""Session books on Redis, for :class:`~gateway.state.redis.RedisStateStore`.

A session's keys share its scope's hash tag (one Cluster slot): ``...:session`` (a hash:
spend, tokens, requests, why stopped, what it was opened with, first and last request),
``...:session:holds`` (hold id -> ``"usd tokens"``) and ``...:session:lapse`` (when each
hold lapses). One Lua script checks the caps and places a hold, or settles one, in one
step; every key expires ``idle_ttl_s`` after the session's last request.

An index of sessions by spend (``<prefix>:sessions``, a sorted set under no tag) feeds the
status page; it is written after each step, kept to ``max_indexed`` members, and read
back through the sessions' own hashes (members whose session expired are dropped).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from gateway.state.base import BUDGET_SLACK_USD, SessionCaps, SessionHold, SessionUse, check_scope

Runner = Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]]

# KEYS: book hash, holds hash, lapse zset, settled hold ids (zset). ARGV: op
# (hold|settle|stop), hold id, usd, tokens, hold ttl ms (a settlement: how long its id is
# remembered), idle ttl ms, budget ('' none), max tokens ('' none), reason, then info
# field/value pairs. Returns {allowed, reason, usd, tokens, held usd, held tokens,
# requests, stopped}. A settlement whose id was settled already adds nothing: a retried
# write whose answer was lost counts once.
SESSION = f"""
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local op, id = ARGV[1], ARGV[2]
local usd, tokens = tonumber(ARGV[3]), tonumber(ARGV[4])
local hold_ttl, idle_ttl = tonumber(ARGV[5]), tonumber(ARGV[6])
local lapsed = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
for _, h in ipairs(lapsed) do redis.call('HDEL', KEYS[2], h) end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local held_usd, held_tokens = 0, 0
local holds = redis.call('HGETALL', KEYS[2])
for i = 1, #holds, 2 do
  if holds[i] ~= id then
    local u, k = string.match(holds[i + 1], '^(%S+) (%S+)$')
    held_usd = held_usd + tonumber(u)
    held_tokens = held_tokens + tonumber(k)
  end
end
local spent = tonumber(redis.call('HGET', KEYS[1], 'usd') or '0')
local used = tonumber(redis.call('HGET', KEYS[1], 'tokens') or '0')
redis.call('HSETNX', KEYS[1], 'first', now)
redis.call('HSET', KEYS[1], 'last', now)
for i = 10, #ARGV, 2 do redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1]) end
local allowed, reason = '1', ''
if op == 'hold' then
  if ARGV[7] ~= '' and spent + held_usd + usd > tonumber(ARGV[7]) + {BUDGET_SLACK_USD} then
    reason = 'budget'
    if spent + usd > tonumber(ARGV[7]) + {BUDGET_SLACK_USD} then
      redis.call('HSET', KEYS[1], 'stopped', 'budget')
    end
  elseif ARGV[8] ~= '' and used + held_tokens + tokens > tonumber(ARGV[8]) then
    reason = 'tokens'
    if used + tokens > tonumber(ARGV[8]) then
      redis.call('HSET', KEYS[1], 'stopped', 'tokens')
    end
  end
  if reason ~= '' then
    allowed = '0'
  else
    redis.call('HSET', KEYS[2], id, string.format('%.17g %d', usd, tokens))
    redis.call('ZADD', KEYS[3], now + hold_ttl, id)
    redis.call('HINCRBY', KEYS[1], 'requests', 1)
    redis.call('HSET', KEYS[1], 'stopped', '')
    held_usd, held_tokens = held_usd + usd, held_tokens + tokens
  end
elseif op == 'settle' then
  redis.call('HDEL', KEYS[2], id)
  redis.call('ZREM', KEYS[3], id)
  if id == '' or not redis.call('ZSCORE', KEYS[4], id) then
    spent = tonumber(redis.call('HINCRBYFLOAT', KEYS[1], 'usd', ARGV[3]))
    used = redis.call('HINCRBY', KEYS[1], 'tokens', tokens)
  end
  if id ~= '' then
    redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now - hold_ttl)
    redis.call('ZADD', KEYS[4], now, id)
  end
else
  redis.call('HSET', KEYS[1], 'stopped', ARGV[9])
end
redis.call('PEXPIRE', KEYS[1], idle_ttl)
local keep = math.max(idle_ttl, hold_ttl)
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('PEXPIRE', KEYS[2], keep) end
if redis.call('EXISTS', KEYS[3]) == 1 then redis.call('PEXPIRE', KEYS[3], keep) end
if redis.call('EXISTS', KEYS[4]) == 1 then redis.call('PEXPIRE', KEYS[4], keep) end
return {{allowed, reason, string.format('%.17g', spent), tostring(used),
  string.format('%.17g', held_usd), tostring(held_tokens),
  redis.call('HGET', KEYS[1], 'requests') or '0', redis.call('HGET', KEYS[1], 'stopped') or ''}}
"""

# KEYS: the index. ARGV: score, member, members kept, ttl ms.
# GT: two settlements of one session may write here out of order, and a session's spend
# only grows while it lives (an expired one leaves the index before it can come back)
INDEX = """
redis.call('ZADD', KEYS[1], 'GT', ARGV[1], ARGV[2])
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -tonumber(ARGV[3]) - 1)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
"""

_FIXED = {"usd", "tokens", "requests", "stopped", "first", "last"}


class RedisSessions:
    """The session operations of one Redis store; ``run`` maps outages as the store does."""

    def __init__(self, client: Any, prefix: str, run: Runner, max_indexed: int = 1000) -> None:
        self._client = client
        self._prefix = prefix
        self._run = run
        self._max = max_indexed
        self._session = client.register_script(SESSION)
        self._index = client.register_script(INDEX)

    async def call(
        self,
        scope: str,
        op: str,
        args: tuple[str, float, int, SessionCaps, str],
        info: Sequence[tuple[str, str]] = (),
    ) -> SessionHold:
        """One run of :data:`SESSION`; ``args`` is (hold id, usd, tokens, caps, reason)."""
        hold_id, usd, tokens, caps, reason = args
        tag = f"{self._prefix}:{{{check_scope(scope)}}}:session"
        keys = [tag, f"{tag}:holds", f"{tag}:lapse", f"{tag}:settled"]
        argv: list[str] = [
            op,
            hold_id,
            repr(float(usd)),
            str(int(tokens)),
            str(max(1, round(caps.hold_ttl_s * 1000))),
            str(max(1, round(caps.idle_ttl_s * 1000))),
            "" if caps.budget_usd is None else repr(float(caps.budget_usd)),
            "" if caps.max_tokens is None else str(caps.max_tokens),
            reason,
            *(part for k, v in info if k not in _FIXED for part in (k, v)),
        ]
        raw = await self._run(lambda: self._session(keys, argv))
        allowed, why = _str(raw[0]) == "1", _str(raw[1])
        use = SessionUse(
            scope,
            usd=float(raw[2]),
            tokens=int(raw[3]),
            held_usd=float(raw[4]),
            held_tokens=int(raw[5]),
            requests=int(raw[6]),
            stopped=_str(raw[7]),
        )
        if op != "hold" or not allowed:  # a hold changes no spend: the index stays right
            index = [repr(use.usd), scope, str(self._max), str(round(caps.idle_ttl_s * 1000))]
            await self._run(lambda: self._index([self._index_key()], index))
        return SessionHold(allowed, why, use)

    async def top(self, count: int) -> list[SessionUse]:
        members = await self._run(
            lambda: self._client.zrevrange(self._index_key(), 0, max(0, count - 1))
        )
        out: list[SessionUse] = []
        for member in members:
            scope = _str(member)
            fields = await self._fields(scope)
            if fields:
                out.append(_use(scope, fields))
            else:  # the session expired: its index entry goes too
                await self._forget(scope)
        return sorted(out, key=lambda use: use.usd, reverse=True)

    async def _fields(self, scope: str) -> dict[str, str]:
        tag = f"{self._prefix}:{{{scope}}}:session"
        raw = await self._run(lambda: self._client.hgetall(tag))
        return {_str(k): _str(v) for k, v in raw.items()}

    async def _forget(self, scope: str) -> None:
        await self._run(lambda: self._client.zrem(self._index_key(), scope))

    def _index_key(self) -> str:
        return f"{self._prefix}:sessions"


def _use(scope: str, fields: dict[str, str]) -> SessionUse:
    info = tuple(sorted((k, v) for k, v in fields.items() if k not in _FIXED))
    return SessionUse(
        scope,
        usd=float(fields.get("usd", 0) or 0),
        tokens=int(fields.get("tokens", 0) or 0),
        requests=int(fields.get("requests", 0) or 0),
        stopped=fields.get("stopped", ""),
        info=info,
        first=float(fields.get("first", 0) or 0) / 1000,
        last=float(fields.get("last", 0) or 0) / 1000,
    )


def _str(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)
