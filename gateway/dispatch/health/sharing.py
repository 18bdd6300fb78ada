"""Replicas act as one: breaker state, probes, learned context lengths and live latency
figures go through the state store.

Every ``interval_s`` each replica publishes, per deployment, whether its breaker is open
(until when and since when, in wall-clock time), the context length it learned, and its
latency averages; it then reads the others'. A breaker another replica opened opens here
too (LiteLLM-style: a local copy re-checked every second), unless this replica has seen the
deployment answer since; the smallest learned context length wins; peers' averages are
blended into the figures the policies route on.

Background probes are shared too: one replica probes each open deployment per probe
interval (the first to take the interval's ``probe:{name}`` counter), and a probe that
passes (``probe_ok:{name}``) makes every replica's breaker half-open. So is the half-open
trial: when a cooldown ends, only the replica that takes ``trial:{name}`` (it lasts one
cooldown) lets a request through; the others stay open, adopt the longer opening that a
failed trial or probe publishes, and close once the trial's pass is published (a breaker
that closes after an opening publishes its pass as a probe's). A dead upstream thus
costs one request per cooldown in all, however many workers and replicas there are.
"""

from __future__ import annotations

import contextlib
import functools
import json
import time
from collections.abc import Callable, Mapping
from typing import Protocol

import structlog

from gateway.common.periodic import Periodic
from gateway.dispatch.health.breakers import CircuitBreaker
from gateway.dispatch.health.learned import ContextLimits
from gateway.dispatch.health.live import DeploymentTracker
from gateway.dispatch.health.probing import Prober
from gateway.state.base import StateStore, StateUnavailable

log = structlog.get_logger("shunter.sharing")
FIGURES_TTL_S = 10.0
PROBE_PASS_TTL_S = 60.0
MAX_PEERS = 32


class SharedFleet(Protocol):
    """What replicas share of a gateway's fleet (:class:`~gateway.dispatch.health.fleet.Fleet`
    or the gateway that holds it)."""

    @property
    def backends(self) -> Mapping[str, object]: ...

    @property
    def breakers(self) -> Mapping[str, CircuitBreaker]: ...

    @property
    def trackers(self) -> Mapping[str, DeploymentTracker]: ...

    @property
    def context_limits(self) -> ContextLimits: ...

    @property
    def prober(self) -> Prober: ...


class ReplicaSync:
    def __init__(
        self,
        store: StateStore,
        gateway: SharedFleet,
        interval_s: float = 1.0,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.gateway = gateway
        self.interval_s = interval_s
        self.wall = wall
        self.replica = -1
        self._announced: dict[str, float] = {}
        self._ticker = Periodic(interval_s, self._tick)

    async def start(self) -> None:
        with contextlib.suppress(StateUnavailable):
            self.replica = await self.store.shared_incr("replicas", 1, 7 * 24 * 3600)
        self.gateway.prober.claim = self.claim_probe
        self.gateway.prober.on_pass = self.probe_passed
        self._ticker.start()

    async def stop(self) -> None:
        await self._ticker.stop()
        self.gateway.prober.claim = self.gateway.prober.on_pass = None

    async def _tick(self) -> None:
        # the store logs outages; local state keeps working meanwhile
        with contextlib.suppress(StateUnavailable):
            await self.sync()

    async def sync(self) -> None:
        """Publish this replica's view, then take in the others'."""
        for name in list(self.gateway.backends):
            await self._sync_breaker(name)
            await self._sync_context(name)
            await self._sync_figures(name)

    async def claim_probe(self, name: str) -> bool:
        """Whether this replica probes ``name`` this interval (the store down: it does)."""
        interval = self.gateway.prober.interval_s or 1.0
        try:
            return await self.store.shared_incr(f"probe:{{{name}}}", 1, interval) == 1
        except StateUnavailable:
            return True

    async def probe_passed(self, name: str) -> None:
        """Tell the other replicas that ``name`` passed a probe."""
        with contextlib.suppress(StateUnavailable):
            await self.store.shared_set(f"probe_ok:{{{name}}}", str(self.wall()), PROBE_PASS_TTL_S)

    def _wall(self, breaker: CircuitBreaker, at: float | None) -> float:
        """A breaker clock reading as wall-clock time (``-inf`` for never)."""
        return -float("inf") if at is None else self.wall() - (breaker.clock() - at)

    async def claim_trial(self, name: str, breaker: CircuitBreaker) -> bool:
        """Whether this replica lets ``name``'s half-open trial through: the first to take
        the shared ``trial:{name}`` counter, which lasts one cooldown (the store down: it
        does, as a lone process would)."""
        try:
            return await self.store.shared_incr(f"trial:{{{name}}}", 1, breaker.cooldown()) == 1
        except StateUnavailable:
            return True

    async def _sync_breaker(self, name: str) -> None:
        breaker = self.gateway.breakers.get(name)
        if breaker is None:
            return
        if breaker.trial_gate is None:
            breaker.trial_gate = functools.partial(self.claim_trial, name, breaker)
        key = f"breaker:{{{name}}}"
        raw_pass = await self.store.shared_get(f"probe_ok:{{{name}}}")
        passed = float(raw_pass) if raw_pass is not None else -float("inf")
        await self._take_pass(name, breaker, passed)
        shared = _pair(await self.store.shared_get(key))
        if breaker.state != "closed":
            await self._publish_opening(key, breaker, shared)
            return
        await self._announce_recovery(name, breaker, passed)
        if shared is None:
            return
        until, since = shared
        remaining = until - self.wall()
        # an opening older than this replica's last success with it, or than a passed
        # probe, is stale news
        if remaining > 0 and since > max(passed, self._wall(breaker, breaker.closed_at)):
            log.info("breaker_opened_by_peer", deployment=name, seconds=round(remaining, 1))
            breaker.open_for(remaining)

    async def _take_pass(self, name: str, breaker: CircuitBreaker, passed: float) -> None:
        """A trial that passed elsewhere after this breaker began waiting on it closes it;
        a probe that passed after it opened makes it half-open."""
        if breaker.state == "closed":
            return
        if breaker.waiting_since is not None:
            if passed > self._wall(breaker, breaker.waiting_since):
                log.info("breaker_closed_by_peer", deployment=name)
                breaker.record_success()
        elif breaker.state == "open" and passed > self._wall(breaker, breaker.opened_at):
            breaker.probe_passed()

    async def _publish_opening(
        self, key: str, breaker: CircuitBreaker, shared: tuple[float, float] | None
    ) -> None:
        """Adopt a later end of the shared opening (a peer's failed trial or probe), then
        publish this one's."""
        if shared is not None and breaker.state == "open":
            later = shared[0] - self.wall()
            if later > breaker.retry_in():
                breaker.open_for(later)
        remaining = breaker.retry_in()
        if remaining <= 0:
            return
        since = self._wall(breaker, breaker.opened_at)
        await self.store.shared_set(key, json.dumps([self.wall() + remaining, since]), remaining)

    async def _announce_recovery(self, name: str, breaker: CircuitBreaker, passed: float) -> None:
        """This replica's trial passed (its breaker closed after an opening): the replicas
        waiting on it close theirs."""
        closed_at = breaker.closed_at
        if closed_at is None or self._announced.get(name) == closed_at:
            return
        self._announced[name] = closed_at
        at = self._wall(breaker, closed_at)
        if at > passed:
            await self.store.shared_set(f"probe_ok:{{{name}}}", str(at), PROBE_PASS_TTL_S)
            # a replica whose cooldown ends later takes a trial of its own, not a wait
            await self.store.shared_delete(f"trial:{{{name}}}")

    async def _sync_context(self, name: str) -> None:
        limits = self.gateway.context_limits
        key = f"context:{{{name}}}"
        shared = _pair(await self.store.shared_get(key))
        if shared is not None and shared[1] > self.wall():
            limits.learn(name, int(shared[0]), shared[1] - self.wall())
        own = limits.get(name)
        if own is not None and (shared is None or own < shared[0]):
            remaining = limits.remaining_s(name)
            await self.store.shared_set(key, json.dumps([own, self.wall() + remaining]), remaining)

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


def _pair(raw: str | None) -> tuple[float, float] | None:
    """A shared ``[number, number]``; ``None`` when absent or not that shape."""
    if raw is None:
        return None
    try:
        first, second = json.loads(raw)
        return float(first), float(second)
    except (ValueError, TypeError):
        return None
