"""Background health probes of deployments whose breaker is open (active health checks,
in the manner of Envoy's).

Every ``probe_interval_s`` each deployment whose breaker is open gets one cheap probe, so a
recovery is seen without spending a user request on it:

* a backend with a ``health(timeout_s)`` method answers for itself (the OpenAI-compatible
  and Anthropic backends ``GET`` their ``health_path``, by default the model list, then
  send a one-token chat request: a model list can answer while chat fails);
* any other backend (an in-process engine) is judged by its own state: healthy unless its
  engine reports a stall.

A probe that succeeds makes the breaker half-open at once (the next request is the trial);
one that fails is the failed trial and starts the cooldown again, so during an outage no
client request reaches the deployment; an inconclusive one changes nothing.
With several replicas, :attr:`Prober.claim` (set by :mod:`gateway.dispatch.health.sharing`) lets
one replica probe each deployment per interval, and :attr:`Prober.on_pass` tells the others.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Literal, Protocol, runtime_checkable

import structlog

from backends.base import Backend
from gateway.common.periodic import Periodic
from gateway.dispatch.health.breakers import CircuitBreaker

ProbeResult = Literal["healthy", "unhealthy", "unknown"]
PROBE_RESULTS: tuple[ProbeResult, ...] = ("healthy", "unhealthy", "unknown")
MAX_PROBE_TIMEOUT_S = 5.0
log = structlog.get_logger("shunter.probes")


@runtime_checkable
class HealthChecked(Protocol):
    """A backend that can tell whether its upstream is up, cheaply."""

    async def health(self, timeout_s: float) -> bool | None:
        """``True`` up, ``False`` down, ``None`` cannot tell."""
        ...


Targets = Callable[[], Mapping[str, tuple[Backend, CircuitBreaker]]]


class Prober:
    """Probes the open deployments among ``targets()`` every ``interval_s`` seconds."""

    def __init__(self, targets: Targets, interval_s: float | None) -> None:
        self._targets = targets
        self.interval_s = interval_s
        self.claim: Callable[[str], Awaitable[bool]] | None = None
        """May this replica probe ``name`` this interval? (None: always.)"""
        self.on_pass: Callable[[str], Awaitable[None]] | None = None
        """Told of every probe that succeeded (to pass it on to other replicas)."""
        self._ticker: Periodic | None = None
        self._running = False

    def start(self) -> None:
        """Probe from now on (every interval, while one is set)."""
        self._running = True
        if self.interval_s is not None and self._ticker is None:
            self._ticker = Periodic(self.interval_s, self.round)
            self._ticker.start()

    async def stop(self) -> None:
        self._running = False
        await self._halt()

    async def retune(self, interval_s: float | None) -> None:
        """Apply a reloaded ``probe_interval_s`` (``None`` stops probing)."""
        if interval_s == self.interval_s:
            return
        await self._halt()
        self.interval_s = interval_s
        if self._running:
            self.start()

    async def _halt(self) -> None:
        ticker, self._ticker = self._ticker, None
        if ticker is not None:
            await ticker.stop()

    async def round(self) -> None:
        """Probe every deployment whose breaker is open, together."""
        due = [(n, b, br) for n, (b, br) in self._targets().items() if br.state == "open"]
        if due:
            await asyncio.gather(*(self._probe(*target) for target in due))

    async def _probe(self, name: str, backend: Backend, breaker: CircuitBreaker) -> None:
        if self.claim is not None and not await self.claim(name):
            return  # another replica probes it this interval
        timeout_s = min(self.interval_s or MAX_PROBE_TIMEOUT_S, MAX_PROBE_TIMEOUT_S)
        result = await probe(backend, timeout_s)
        breaker.probes[result] += 1
        if result == "unhealthy":
            breaker.probe_failed()
        if result != "healthy" or breaker.state != "open":
            return
        breaker.probe_passed()
        log.info(
            "deployment_probe_passed", deployment=name, effect="half-open: next request tries it"
        )
        if self.on_pass is not None:
            await self.on_pass(name)


async def probe(backend: Backend, timeout_s: float) -> ProbeResult:
    """One health probe of ``backend``; it never raises."""
    if not isinstance(backend, HealthChecked):
        return "unhealthy" if backend.stats().stalled else "healthy"
    up: bool | None = False
    with contextlib.suppress(Exception):  # a probe that breaks says: not up
        async with asyncio.timeout(timeout_s + 1.0):
            up = await backend.health(timeout_s)
    return "unknown" if up is None else "healthy" if up else "unhealthy"
