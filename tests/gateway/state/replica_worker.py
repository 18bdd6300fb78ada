"""A gateway replica's key check and rate limit, in its own process (two-replica test).

``python -m tests.gateway.state.replica_worker URL PREFIX SECRET RPM ATTEMPTS`` connects,
prints ``ready``, waits for a line on stdin, tries ``ATTEMPTS`` admissions at once and
prints ``{"admitted": N, "local_fallbacks": M}``. The secret comes on stdin, not argv.
"""

from __future__ import annotations

import asyncio
import json
import sys

from gateway.admission.keys import KeyRing
from gateway.admission.limits import Limiter, LimitExceededError, RateLimit
from gateway.state.redis import RedisStateStore


async def replica(url: str, prefix: str, attempts: int) -> dict[str, int]:
    store = RedisStateStore.from_url(url, prefix=prefix)
    keys, limiter = KeyRing(store), Limiter(store)
    secret = sys.stdin.readline().strip()
    key = await keys.authenticate(f"Bearer {secret}", "tiny")  # also warms the connection
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)

    async def attempt() -> bool:
        info = await keys.authenticate(f"Bearer {secret}", "tiny")
        try:
            await limiter.reserve(info.scope, f"key '{info.name}'", RateLimit(rpm=key.rpm), 2)
        except LimitExceededError:
            return False
        return True

    results = await asyncio.gather(*(attempt() for _ in range(attempts)))
    await store.aclose()
    return {"admitted": sum(results), "local_fallbacks": limiter.stats.local_fallbacks}


if __name__ == "__main__":
    url, prefix, attempts = sys.argv[1], sys.argv[2], int(sys.argv[3])
    print(json.dumps(asyncio.run(replica(url, prefix, attempts))), flush=True)
