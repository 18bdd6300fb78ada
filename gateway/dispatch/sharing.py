"""Replicas act as one: breaker state and live latency figures go through the state store.

Every ``interval_s`` each replica publishes, per deployment, whether its breaker is open
(and until when, in wall-clock time) and its latency averages; it then reads the others'.
A breaker another replica opened opens here too (LiteLLM-style: a local copy re-checked
every second); peers' averages are blended into the figures the policies route on.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable

import structlog

from gateway.common.periodic import Periodic
from gateway.dispatch.router import Gateway
from gateway.state.base import StateStore, StateUnavailable

log = structlog.get_logger("shunter.sharing")
FIGURES_TTL_S = 10.0
MAX_PEERS = 32


class ReplicaSync:
    def __init__(
        self,
        store: StateStore,
        gateway: Gateway,
        interval_s: float = 1.0,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.gateway = gateway
        self.interval_s = interval_s
        self.wall = wall
        self.replica = -1
        self._ticker = Periodic(interval_s, self._tick)

    async def start(self) -> None:
        with contextlib.suppress(StateUnavailable):
            self.replica = await self.store.shared_incr("replicas", 1, 7 * 24 * 3600)
        self._ticker.start()

    async def stop(self) -> None:
        await self._ticker.stop()

    async def _tick(self) -> None:
        # the store logs outages; local state keeps working meanwhile
        with contextlib.suppress(StateUnavailable):
            await self.sync()

    async def sync(self) -> None:
        """Publish this replica's view, then take in the others'."""
        for name in list(self.gateway.backends):
            await self._sync_breaker(name)
            await self._sync_figures(name)

    async def _sync_breaker(self, name: str) -> None:
        breaker = self.gateway.breakers.get(name)
        if breaker is None:
            return
        key = f"breaker:{{{name}}}"
        if breaker.state == "open":
            remaining = breaker.retry_in()
            await self.store.shared_set(key, str(self.wall() + remaining), remaining)
            return
        shared = await self.store.shared_get(key)
        if shared is None:
            return
        remaining = float(shared) - self.wall()
        if remaining > 0 and breaker.state == "closed":
            log.info("breaker_opened_by_peer", deployment=name, seconds=round(remaining, 1))
            breaker.open_for(remaining)

    async def _sync_figures(self, name: str) -> None:
        tracker = self.gateway.trackers.get(name)
        if tracker is None or self.replica < 0:
            return
        own = json.dumps(tracker.averages())
        await self.store.shared_set(f"live:{{{name}}}:{self.replica}", own, FIGURES_TTL_S)
        newest = int(await self.store.shared_get("replicas") or self.replica)
        peers = []
        for replica in range(max(1, newest - MAX_PEERS + 1), newest + 1):
            if replica == self.replica:
                continue
            raw = await self.store.shared_get(f"live:{{{name}}}:{replica}")
            if raw is not None:
                peers.append(json.loads(raw))
        tracker.peers = peers
