"""Circuit breakers and retry timing for deployments.

A breaker opens after ``failure_threshold`` consecutive deployment failures (connect errors,
timeouts, cut streams, 429/5xx from upstream: never a 4xx caused by the request). It stays
open for a cooldown: ``cooldown_s`` the first time, doubled on each re-opening, capped at
``max_cooldown_s``. Then it is half-open: one request may try (the trial); success closes it
and resets the cooldown, failure opens it again. Where several processes share breakers
(workers, replicas; :attr:`CircuitBreaker.peers`), the failures in a row are counted
across them all, an opening reaches the others at once, and one trial serves them all:
the process that takes the shared trial lets it through, the others stay open until its
outcome reaches them. While it is open, a
background health probe (:mod:`gateway.dispatch.health.probing`) that succeeds makes it
half-open at once, so a recovered deployment is tried again without waiting for the
cooldown; one that fails
starts the cooldown again, so while probes keep failing no client request is spent on a
trial.

A deployment that fails again (a rate limit aside) within ``flap_window_s`` of recovering
(closing after an opening) is flapping: that first failure opens its breaker again, so
each down phase of a flapping upstream costs the fleet one failed request instead of a
threshold's worth.

::

    closed --threshold failures--> open --cooldown over, or a probe succeeds--> half_open
    half_open --trial succeeds--> closed       half_open --trial fails--> open (longer)

Retries wait like a good client: the upstream's ``retry-after`` when it sends one, else
exponential back-off with full jitter (up to ``backoff_base_s`` x 2^n, capped at
``backoff_max_s``), and never more than two attempts on one deployment within
:data:`ATTEMPT_WINDOW_S` for one request.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from gateway.config import ReliabilitySettings

BreakerState = Literal["closed", "open", "half_open"]
BREAKER_STATES: tuple[BreakerState, ...] = ("closed", "open", "half_open")
ATTEMPT_WINDOW_S = 1.0
"""One request makes at most two attempts on one deployment within this many seconds."""


class BreakerPeers(Protocol):
    """The other processes (workers, replicas) that share one deployment's breaker; set by
    :mod:`gateway.dispatch.health.sharing`. None of these raises for an unreachable store:
    the breaker then acts alone, as a single process does."""

    async def take_trial(self) -> bool:
        """Whether this process lets the shared half-open trial through."""
        ...

    async def count_failure(self) -> int | None:
        """Add a failure to the run the processes count together; the run's length (``None``:
        not known now)."""
        ...

    async def opened(self) -> None:
        """This breaker has just opened: tell the others now."""
        ...


@dataclass
class CircuitBreaker:
    """One deployment's breaker; ``clock`` is injectable for tests.

    It also keeps the deployment's reliability tallies for ``/metrics``: ``fallbacks``
    (requests that left it for another candidate, by cause) and ``probes`` (background
    health probes, by result)."""

    failure_threshold: int = 3
    cooldown_s: float = 5.0
    max_cooldown_s: float = 10.0
    clock: Callable[[], float] = time.monotonic
    flap_window_s: float = 0.0
    """A failure within this many seconds of closing after an opening opens at once."""
    failures: int = 0
    openings: int = 0
    open_until: float = 0.0
    opened_at: float | None = None
    closed_at: float | None = None
    last_failure_at: float | None = None
    fallbacks: Counter[str] = field(default_factory=Counter)
    probes: Counter[str] = field(default_factory=Counter)
    peers: BreakerPeers | None = field(default=None, repr=False)
    """The processes this breaker is shared with (``None``: this process alone)."""
    succeeded_at: float | None = None
    """The last success (a clock reading), which ends the run of failures the processes share."""
    waiting_since: float | None = None
    """Since when another process holds the trial this breaker waits on (``None``: none)."""
    _probing: bool = field(default=False, repr=False)

    @property
    def state(self) -> BreakerState:
        if self.openings == 0 or self.failures < self.failure_threshold:
            return "closed"
        return "open" if self.clock() < self.open_until else "half_open"

    def allow(self) -> bool:
        """May a request go to this deployment now? In half-open state, only one trial."""
        state = self.state
        if state == "closed":
            return True
        if state == "open" or self._probing:
            return False
        self._probing = True
        return True

    async def admit(self) -> bool:
        """:meth:`allow`, with the half-open trial shared: given :attr:`peers`, only the
        process that takes the trial lets it through; here the breaker stays open for
        another cooldown, waiting on that trial's outcome (a pass closes it, a failure's
        longer opening is adopted)."""
        if self.peers is None or self.state != "half_open" or self._probing:
            return self.allow()
        self._probing = True  # no second trial here while the peers answer
        try:
            taken = await self.peers.take_trial()
        except BaseException:
            self._probing = False
            raise
        if taken:
            self.waiting_since = None
            return True
        self._probing = False
        self.waiting_since = self.clock()
        self.open_until = max(self.open_until, self.clock() + self.cooldown())
        return False

    def cooldown(self) -> float:
        """The length of the current (or next) opening."""
        doublings: int = max(self.openings - 1, 0)
        return min(self.cooldown_s * 2.0**doublings, self.max_cooldown_s)

    def retry_in(self) -> float:
        return max(0.0, self.open_until - self.clock())

    def record_success(self) -> None:
        self.succeeded_at = self.clock()
        if self.openings:
            self.closed_at = self.succeeded_at
        self.failures, self.openings, self._probing = 0, 0, False
        self.waiting_since = None

    def open_for(self, seconds: float) -> None:
        """Open now for ``seconds``, because another replica saw this deployment fail."""
        self.failures = max(self.failures, self.failure_threshold)
        if self.openings == 0:
            self.opened_at = self.clock()
        self.openings = max(self.openings, 1)
        self.open_until = max(self.open_until, self.clock() + seconds)
        self._probing = False

    def probe_passed(self) -> None:
        """A background health probe succeeded: end the cooldown now (half-open), so the
        next request is the trial."""
        if self.state == "open":
            self.open_until = self.clock()

    def probe_failed(self) -> None:
        """A background probe (a real request, as a trial would be) failed: the cooldown
        starts again, so no client request is the next to find the deployment down."""
        if self.state == "open" and self.openings:
            cooldown = min(self.cooldown_s * 2 ** (self.openings - 1), self.max_cooldown_s)
            self.open_until = max(self.open_until, self.clock() + cooldown)

    def record_abandoned(self) -> None:
        """The request went away before an outcome: free a half-open trial."""
        self._probing = False

    def record_failure(self, *, down: bool = True) -> None:
        """One failure; ``down``: not a rate limit (a deployment that answers 429 soon
        after it recovered is busy, not flapping)."""
        self.failures += 1
        self.last_failure_at = now = self.clock()
        self._probing = False
        self.waiting_since = None
        closed = self.closed_at
        flapped = down and closed is not None and now - closed < self.flap_window_s
        if flapped and self.openings == 0:
            # it failed again soon after it recovered: flapping, so its first failure
            # opens it rather than a threshold's worth of client requests each time
            self.failures = max(self.failures, self.failure_threshold)
        if self.failures >= self.failure_threshold:
            self._open()

    async def fail(self, *, down: bool = True) -> None:
        """:meth:`record_failure`; with :attr:`peers`, the failure is counted in the run
        they share (other processes' failures in a row count here too), and an opening is
        told to them at once."""
        peers, openings = self.peers, self.openings
        counted = peers is not None and self.state == "closed"
        self.record_failure(down=down)
        if peers is None:
            return
        if counted:
            succeeded = self.succeeded_at
            run = await peers.count_failure()
            # a success while the count was on its way ended the run
            if run is not None and self.succeeded_at == succeeded:
                self.tally(run)
        if self.openings > openings:
            await peers.opened()

    def tally(self, run: int) -> None:
        """The processes sharing this breaker have seen ``run`` failures in a row."""
        if self.state == "closed" and run > self.failures:
            self.failures = run
            if run >= self.failure_threshold:
                self._open()

    def _open(self) -> None:
        cooldown = min(self.cooldown_s * 2**self.openings, self.max_cooldown_s)
        self.openings += 1
        self.opened_at = self.clock()
        self.open_until = self.opened_at + cooldown


def new_breaker(settings: ReliabilitySettings) -> CircuitBreaker:
    """A closed breaker with the configured threshold and cooldowns."""
    return CircuitBreaker(
        settings.failure_threshold,
        settings.cooldown_s,
        settings.max_cooldown_s,
        flap_window_s=settings.flap_window_s,
    )


def backoff_delay(attempt: int, retry_after: float | None, settings: ReliabilitySettings) -> float:
    """Delay before retry number ``attempt`` (0-based): the upstream's retry-after if it
    gave one, else full-jitter exponential back-off."""
    if retry_after is not None:
        return retry_after
    ceiling = min(settings.backoff_base_s * 2**attempt, settings.backoff_max_s)
    return random.uniform(0, ceiling)


def spacing_delay(started: Sequence[float], now: float) -> float:
    """How long the next attempt must wait so that at most two of this request's attempts
    on one deployment fall within any :data:`ATTEMPT_WINDOW_S` (``started``: when the
    earlier ones began, oldest first)."""
    if len(started) < 2:
        return 0.0
    return max(0.0, started[-2] + ATTEMPT_WINDOW_S - now)
