"""Replicas act as one: breaker state, failure counts, probes, learned context lengths and
live latency figures go through the state store.

A replica (a ``serve --workers`` worker too) reads all of it once before it serves, so one
that starts or restarts while the fleet holds a breaker open starts with it open. Then,
every ``interval_s``, each replica publishes, per deployment, whether its breaker is open
(until when and since when, in wall-clock time), the context length it learned, and its
latency averages; it then reads the others'. A breaker another replica opened opens here
too (LiteLLM-style: a local copy re-checked every second), unless this replica has seen the
deployment answer since; the smallest learned context length wins; peers' averages are
blended into the figures the policies route on.

Failures in a row are counted across replicas: each failure adds to the deployment's shared
run (``failures:{name}``), and a breaker opens when the run reaches its threshold, wherever
the failures happened. A success ends the run: at once for a failure reported by the
replica that saw it, else within ``interval_s``, when the replica publishes. A breaker that
opens publishes its opening and sends a notice at once (Redis pub/sub), so the others open
within a round trip rather than at their next tick: a deployment that goes down costs the
fleet the requests that make up one threshold, not one threshold per worker. A replica that
finds a run past the threshold with no opening left (the fleet waits on a trial) starts
half-open.

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
import json
import secrets
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
RUN_TTL_S = 600.0  # a run of failures this old is forgotten
MAX_PEERS = 32
NOTICES = "breakers"


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
        self.token = secrets.token_hex(8)  # tells this replica's notices from the others'
        self._announced: dict[str, float] = {}
        self._passed: dict[str, float] = {}  # the last probe pass read, per deployment
        self._ticker = Periodic(interval_s, self._tick)
        self._listener = Periodic(interval_s, self._listen, at_once=True)

    async def start(self) -> None:
        """Take in what the other replicas know (before this one serves), then keep in step."""
        with contextlib.suppress(StateUnavailable):
            self.replica = await self.store.shared_incr("replicas", 1, 7 * 24 * 3600)
        self.gateway.prober.claim = self.claim_probe
        self.gateway.prober.on_pass = self.probe_passed
        await self._tick()
        self._listener.start()
        self._ticker.start()

    async def stop(self) -> None:
        await self._ticker.stop()
        await self._listener.stop()
        self.gateway.prober.claim = self.gateway.prober.on_pass = None
        for breaker in self.gateway.breakers.values():
            breaker.peers = None

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

    async def count_failure(self, name: str, breaker: CircuitBreaker) -> int | None:
        """Add a failure of ``name`` to the run the replicas share; the run's length (the
        store down: ``None``, this replica counts alone)."""
        since = max(self._wall(breaker, breaker.succeeded_at), 0.0)
        try:
            return await self.store.shared_run(
                f"failures:{{{name}}}", self.wall(), since, RUN_TTL_S
            )
        except StateUnavailable:
            return None

    async def opened(self, name: str) -> None:
        """``name``'s breaker opened here: publish the opening and tell the others now."""
        with contextlib.suppress(StateUnavailable):
            await self._sync_breaker(name)
            breaker = self.gateway.breakers.get(name)
            if breaker is None or breaker.state != "open":
                return
            opening = [self.wall() + breaker.retry_in(), self._wall(breaker, breaker.opened_at)]
            notice = {"from": self.token, "deployment": name, "opening": opening}
            await self.store.shared_publish(NOTICES, json.dumps(notice))

    async def _listen(self) -> None:
        """Take in the other replicas' openings as they are told, until the store goes
        away (the ticker carries on; listening starts again after ``interval_s``)."""
        with contextlib.suppress(StateUnavailable):
            async for raw in self.store.shared_listen(NOTICES):
                self._heard(raw)

    def _heard(self, raw: str) -> None:
        """One notice: adopted at once, without a round trip to the store, so that a
        request this replica routes next already finds the breaker open."""
        try:
            notice = json.loads(raw)
            name, (until, since) = notice["deployment"], notice["opening"]
            opening = float(until), float(since)
        except (ValueError, TypeError, KeyError):
            return
        breaker = self.gateway.breakers.get(name)
        if notice.get("from") != self.token and breaker is not None:
            self._adopt(name, breaker, opening)

    async def _sync_breaker(self, name: str) -> None:
        breaker = self.gateway.breakers.get(name)
        if breaker is None:
            return
        if breaker.peers is None:
            breaker.peers = _Peers(self, name, breaker)
        key = f"breaker:{{{name}}}"
        raw_pass = await self.store.shared_get(f"probe_ok:{{{name}}}")
        passed = float(raw_pass) if raw_pass is not None else -float("inf")
        self._passed[name] = passed
        await self._take_pass(name, breaker, passed)
        shared = _pair(await self.store.shared_get(key))
        if breaker.state != "closed":
            await self._publish_opening(name, key, breaker, shared)
            return
        await self._announce_recovery(name, breaker, passed)
        if shared is None or not self._adopt(name, breaker, shared):
            await self._sync_run(name, breaker, self._fresh_after(name, breaker))

    def _fresh_after(self, name: str, breaker: CircuitBreaker) -> float:
        """An opening or a run older than this replica's last closing, or than a passed
        probe, is stale news."""
        return max(self._passed.get(name, -float("inf")), self._wall(breaker, breaker.closed_at))

    def _adopt(self, name: str, breaker: CircuitBreaker, opening: tuple[float, float]) -> bool:
        """Take in another replica's opening (until, since): a closed breaker opens unless
        the news is stale; an open one takes a later end. Whether this breaker is open now."""
        remaining = opening[0] - self.wall()
        if breaker.state == "closed":
            if remaining <= 0 or opening[1] <= self._fresh_after(name, breaker):
                return False
            log.info("breaker_opened_by_peer", deployment=name, seconds=round(remaining, 1))
            breaker.open_for(remaining)
        elif breaker.state == "open" and remaining > breaker.retry_in():
            breaker.open_for(remaining)
        return breaker.state == "open"

    async def _sync_run(self, name: str, breaker: CircuitBreaker, fresh_after: float) -> None:
        """End the shared run of failures when this replica has seen a success since its
        last one; start half-open when it reached the threshold and its opening is over
        (the fleet waits on a trial)."""
        key = f"failures:{{{name}}}"
        run = _pair(await self.store.shared_get(key), " ")
        if run is None:
            return
        length, last = run
        if self._wall(breaker, breaker.succeeded_at) > last:
            await self.store.shared_delete(key)
        elif length >= breaker.failure_threshold and last > fresh_after:
            log.info("breaker_half_open_by_peers", deployment=name, failures=int(length))
            breaker.open_for(0.0)

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
        self, name: str, key: str, breaker: CircuitBreaker, shared: tuple[float, float] | None
    ) -> None:
        """Adopt a later end of the shared opening (a peer's failed trial or probe), then
        publish this one's."""
        if shared is not None:
            self._adopt(name, breaker, shared)
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


class _Peers:
    """The replicas sharing one deployment's breaker, as the breaker asks them
    (:class:`~gateway.dispatch.health.breakers.BreakerPeers`)."""

    def __init__(self, sync: ReplicaSync, name: str, breaker: CircuitBreaker) -> None:
        self._sync, self._name, self._breaker = sync, name, breaker

    async def take_trial(self) -> bool:
        return await self._sync.claim_trial(self._name, self._breaker)

    async def count_failure(self) -> int | None:
        return await self._sync.count_failure(self._name, self._breaker)

    async def opened(self) -> None:
        await self._sync.opened(self._name)


def _pair(raw: str | None, sep: str | None = None) -> tuple[float, float] | None:
    """A shared ``[number, number]`` (or two numbers split by ``sep``); ``None`` when
    absent or not that shape."""
    if raw is None:
        return None
    try:
        first, second = json.loads(raw) if sep is None else raw.split(sep)
        return float(first), float(second)
    except (ValueError, TypeError):
        return None
