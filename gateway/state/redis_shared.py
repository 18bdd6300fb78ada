"""The small shared dictionary's atomic steps on Redis, and the notices replicas send.

Counters and runs are Lua scripts (one key each, so Cluster-safe). Notices are Redis
pub/sub messages: a listener holds a connection of its own, subscribed to one channel,
and hears what is published from then on (in a Cluster, every node relays them).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

Client = Redis | RedisCluster
Run = Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]]

SHARED_INCR = """
local v = redis.call('INCRBY', KEYS[1], ARGV[1])
if redis.call('PTTL', KEYS[1]) < 0 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return v
"""

# KEYS: the run ("<length> <last event>"). ARGV: this event's time, the time after which
# the run starts again, ttl_ms. Times are strings, compared as numbers.
SHARED_RUN = """
local length, last = 0, nil
local raw = redis.call('GET', KEYS[1])
if raw then
  local sep = string.find(raw, ' ', 1, true)
  length, last = tonumber(string.sub(raw, 1, sep - 1)), tonumber(string.sub(raw, sep + 1))
end
if last == nil or tonumber(ARGV[2]) > last then length = 0 end
length = length + 1
redis.call('SET', KEYS[1], length .. ' ' .. ARGV[1], 'PX', ARGV[3])
return length
"""


async def listen(client: Client, channel: str, run: Run) -> AsyncIterator[str]:
    """The messages published on ``channel`` from now on; ``run`` maps an outage to the
    store's own error. The subscription's connection closes when iteration stops."""
    pubsub = client.pubsub()
    try:
        await run(lambda: pubsub.subscribe(channel))
        while True:
            # blocks without a timeout: a quiet channel is not an outage
            message = await run(
                lambda: pubsub.get_message(ignore_subscribe_messages=True, timeout=None)
            )
            if message is not None and message.get("type") == "message":
                data = message["data"]
                yield data.decode() if isinstance(data, bytes) else str(data)
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]
