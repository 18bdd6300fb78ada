"""Background probes of open deployments, on backends of our own contract."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from backends.base import LiveStats
from gateway.dispatch.health.breakers import CircuitBreaker
from gateway.dispatch.health.probing import Prober
from tests.gateway.scripted import ScriptedBackend


@dataclass
class Checked(ScriptedBackend):
    """A backend that answers health probes as told, and counts them."""

    up: bool | None = True
    probed: int = 0

    async def health(self, timeout_s: float) -> bool | None:
        self.probed += 1
        return self.up


@dataclass
class Stalled(ScriptedBackend):
    """An in-process engine that reports a stall."""

    def stats(self) -> LiveStats:
        return LiveStats(stalled=True)


def opened() -> CircuitBreaker:
    breaker = CircuitBreaker(failure_threshold=1, cooldown_s=60)
    breaker.record_failure()
    return breaker


async def test_only_open_deployments_are_probed_and_a_pass_half_opens() -> None:
    up, down, closed = Checked("up"), Checked("down", up=False), Checked("closed")
    breakers = {"up": opened(), "down": opened(), "closed": CircuitBreaker()}
    backends = {"up": up, "down": down, "closed": closed}
    prober = Prober(lambda: {n: (backends[n], breakers[n]) for n in backends}, 2.0)
    await prober.round()
    assert (up.probed, down.probed, closed.probed) == (1, 1, 0)
    assert breakers["up"].state == "half_open"
    assert breakers["down"].state == "open"  # a failed probe keeps it open
    assert breakers["up"].probes == {"healthy": 1} and breakers["down"].probes == {"unhealthy": 1}
    await prober.round()
    assert up.probed == 1  # half-open: the next request is the trial, no more probes


async def test_engines_are_judged_by_their_own_state() -> None:
    fine, stuck = ScriptedBackend("fine"), Stalled("stuck")
    breakers = {"fine": opened(), "stuck": opened()}
    backends = {"fine": fine, "stuck": stuck}
    await Prober(lambda: {n: (backends[n], breakers[n]) for n in backends}, 2.0).round()
    assert breakers["fine"].state == "half_open" and breakers["stuck"].state == "open"


async def test_a_replica_that_may_not_probe_does_not() -> None:
    backend, breaker = Checked("a"), opened()
    prober = Prober(lambda: {"a": (backend, breaker)}, 2.0)
    passed: list[str] = []

    async def never(name: str) -> bool:
        return False

    async def tell(name: str) -> None:
        passed.append(name)

    prober.claim, prober.on_pass = never, tell
    await prober.round()
    assert backend.probed == 0
    prober.claim = None
    await prober.round()
    assert backend.probed == 1 and passed == ["a"]


async def test_probes_start_when_a_reload_sets_an_interval() -> None:
    backend, breaker = Checked("a", up=False), opened()
    prober = Prober(lambda: {"a": (backend, breaker)}, None)
    prober.start()
    await asyncio.sleep(0.1)
    assert backend.probed == 0
    await prober.retune(0.02)
    for _ in range(200):
        if backend.probed >= 2:
            break
        await asyncio.sleep(0.01)
    await prober.stop()
    assert backend.probed >= 2
