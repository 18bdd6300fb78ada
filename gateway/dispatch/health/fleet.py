"""The fleet: what dispatch knows of each deployment of the config in force, kept across
requests and across reloads for the deployments a reload did not change.

Per deployment: its circuit breaker, its live figures (:class:`DeploymentTracker`), the
context length learned from a rejection, whether it refused a prefill continuation, and
the memory fit of a local one; and the background prober of the open breakers.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from backends.base import Backend
from gateway.config import ReliabilitySettings
from gateway.dispatch.health.breakers import CircuitBreaker, new_breaker
from gateway.dispatch.health.learned import ContextLimits
from gateway.dispatch.health.live import DeploymentTracker
from gateway.dispatch.health.moves import KvExports, MoveLog
from gateway.dispatch.health.probing import Prober
from policies import FitClass

NO_PREFILL_TTL_S = 3600.0


@dataclass
class PrefillRefusals:
    """The deployments that answered a prefill continuation with a 400 (until when their
    prefill is skipped): a resume then asks them in a user turn instead."""

    no_prefill: dict[str, float] = field(default_factory=dict)

    def prefill(self, name: str) -> bool:
        """Whether ``name`` may be sent a prefill continuation."""
        until = self.no_prefill.get(name)
        return until is None or until < time.monotonic()

    def refused(self, name: str) -> None:
        self.no_prefill[name] = time.monotonic() + NO_PREFILL_TTL_S


class Fleet:
    """Each deployment's health and figures; :meth:`reconfigure` follows a reload."""

    def __init__(self, reliability: ReliabilitySettings, backends: dict[str, Backend]) -> None:
        self.backends = backends
        self.breakers = {name: new_breaker(reliability) for name in backends}
        self.trackers = {name: DeploymentTracker() for name in backends}
        self.fits: dict[str, FitClass] = {}
        self.context_limits = ContextLimits()
        self.prefill_refusals = PrefillRefusals()
        self.moves = MoveLog()
        self.kv_exports = KvExports()
        """What this gateway's engines exported while it drains (a worker's handoff)."""
        self.prober = Prober(self._probe_targets, reliability.probe_interval_s)

    def reconfigure(
        self, reliability: ReliabilitySettings, keep: Collection[str], fresh: Collection[str]
    ) -> None:
        """Keep what is known of the deployments in ``keep``; start ``fresh`` ones anew."""
        self.breakers = {
            **{name: self.breakers[name] for name in keep},
            **{name: new_breaker(reliability) for name in fresh},
        }
        self.context_limits.keep_only(keep)  # a changed deployment may hold more now
        self.trackers = {
            **{name: self.trackers[name] for name in keep},
            **{name: DeploymentTracker() for name in fresh},
        }
        self.moves.forget([*keep, *fresh])

    def health(self, name: str) -> dict[str, object]:
        """A deployment's breaker and learned context, for readiness and ``shunter route``."""
        breaker = self.breakers.get(name)
        return {
            "breaker": breaker.state if breaker else "closed",
            "breaker_retry_in_s": round(breaker.retry_in(), 3) if breaker else 0.0,
            "context_learned": self.context_limits.get(name),
        }

    def adopt(self, deployments: Mapping[str, Any]) -> None:
        """Take in a running gateway's view of its deployments (readiness's
        ``deployments``): learned context lengths and open breakers, so that an offline
        explain (``shunter route --live``) routes as that gateway would."""
        for name, seen in deployments.items():
            if name not in self.breakers or not isinstance(seen, Mapping):
                continue
            learned = seen.get("context_learned")
            if isinstance(learned, int) and learned > 0:
                self.context_limits.learn(name, learned)
            retry_in = seen.get("breaker_retry_in_s")
            if seen.get("breaker") == "open" and isinstance(retry_in, int | float):
                self.breakers[name].open_for(float(retry_in))

    def _probe_targets(self) -> dict[str, tuple[Backend, CircuitBreaker]]:
        breakers = self.breakers
        return {n: (b, breakers[n]) for n, b in self.backends.items() if n in breakers}
