"""The Lua scripts that keep a group of shared values under one byte bound in Redis.

A group's index lives under one hash tag (one Cluster slot), so every script touching it
is atomic however many processes write: ``order`` (a sorted set of members by write time),
``lapse`` (the same members by expiry time), ``sizes`` (a hash of each member's bytes) and
``bytes`` (their sum). The values themselves live under their own keys; the scripts name
the members to delete, and the caller deletes those values before writing its own, so the
values in Redis never hold more than the bound for longer than that step.
"""

from __future__ import annotations

# KEYS (every script): order, lapse, sizes, bytes.
_PRELUDE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local total = tonumber(redis.call('GET', KEYS[4]) or '0')
local function drop(member)
  local size = redis.call('HGET', KEYS[3], member)
  if size then
    total = total - tonumber(size)
    redis.call('HDEL', KEYS[3], member)
    redis.call('ZREM', KEYS[1], member)
    redis.call('ZREM', KEYS[2], member)
  end
end
for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 1024)) do
  drop(member)
end
"""

# ARGV: member, size, ttl_ms, max_bytes. After the lapsed members, drops the oldest until
# the new one fits, then counts it. Returns the members dropped while still live (their
# values must be deleted).
BOUNDED_SET = (
    _PRELUDE
    + """
drop(ARGV[1])
local size, ttl_ms, cap = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local evicted = {}
while total + size > cap do
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0)[1]
  if not oldest then break end
  drop(oldest)
  evicted[#evicted + 1] = oldest
end
if total < 0 then total = 0 end
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZADD', KEYS[2], now + ttl_ms * 1000, ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], size)
redis.call('SET', KEYS[4], string.format('%.0f', total + size))
for i = 1, 4 do
  if redis.call('PTTL', KEYS[i]) < ttl_ms then redis.call('PEXPIRE', KEYS[i], ttl_ms) end
end
return evicted
"""
)

# ARGV: member (or ''). Forgets it; returns the bytes the group then holds.
BOUNDED_DROP = (
    _PRELUDE
    + """
if ARGV[1] ~= '' then drop(ARGV[1]) end
if total < 0 then total = 0 end
if redis.call('EXISTS', KEYS[4]) == 1 then
  redis.call('SET', KEYS[4], string.format('%.0f', total), 'KEEPTTL')
end
return total
"""
)
