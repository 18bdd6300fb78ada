"""Circuit breakers and retry timing for deployments.

A breaker opens after ``failure_threshold`` consecutive deployment failures (connect errors,
timeouts, 429/5xx from upstream: never a 4xx caused by the request), stays open for a
cooldown that doubles on each re-opening (capped), then lets one probe request through
(half-open): success closes it, failure re-opens it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from gateway.config import ReliabilitySettings

BreakerState = Literal["closed", "open", "half_open"]


@dataclass
class CircuitBreaker:
    """One deployment's breaker; ``clock`` is injectable for tests."""

    failure_threshold: int = 3
    cooldown_s: float = 5.0
    max_cooldown_s: float = 120.0
    clock: Callable[[], float] = time.monotonic
    failures: int = 0
    openings: int = 0
    open_until: float = 0.0
    last_failure_at: float | None = None
    _probing: bool = field(default=False, repr=False)

    @property
    def state(self) -> BreakerState:
        if self.openings == 0 or self.failures < self.failure_threshold:
            return "closed"
        return "open" if self.clock() < self.open_until else "half_open"

    def allow(self) -> bool:
        """May a request go to this deployment now? In half-open state, only one probe."""
        state = self.state
        if state == "closed":
            return True
        if state == "open" or self._probing:
            return False
        self._probing = True
        return True

    def retry_in(self) -> float:
        return max(0.0, self.open_until - self.clock())

    def record_success(self) -> None:
        self.failures, self.openings, self._probing = 0, 0, False

    def open_for(self, seconds: float) -> None:
        """Open now for ``seconds``, because another replica saw this deployment fail."""
        self.failures = max(self.failures, self.failure_threshold)
        self.openings = max(self.openings, 1)
        self.open_until = max(self.open_until, self.clock() + seconds)
        self._probing = False

    def record_abandoned(self) -> None:
        """The request went away before an outcome: free a half-open probe."""
        self._probing = False

    def record_failure(self) -> None:
        self.failures += 1
        self.last_failure_at = self.clock()
        self._probing = False
        if self.failures >= self.failure_threshold:
            cooldown = min(self.cooldown_s * 2**self.openings, self.max_cooldown_s)
            self.openings += 1
            self.open_until = self.clock() + cooldown


def backoff_delay(attempt: int, retry_after: float | None, settings: ReliabilitySettings) -> float:
    """Delay before retry number ``attempt`` (0-based): the upstream's retry-after if it
    gave one, else full-jitter exponential back-off."""
    if retry_after is not None:
        return retry_after
    ceiling = min(settings.backoff_base_s * 2**attempt, settings.backoff_max_s)
    return random.uniform(0, ceiling)
