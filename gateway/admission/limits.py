"""Rate limits (RPM, TPM) and money budgets over a :class:`StateStore`.

Rate limits fail open: when the shared store is down, :class:`Limiter` decides with local
in-process counters (each replica then allows the full limit on its own) and counts each
such decision in :attr:`Limiter.stats`. Budgets fail closed: a budget that cannot be read
refuses the request with 503 ``budget_unavailable`` (retryable), because letting money be
spent unchecked is worse than a short refusal. Each request holds its worst-case cost from
the budget before it runs and settles to its real cost after (:class:`Budgets`). Spend
that cannot be recorded is kept here and added on the next successful write.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import structlog

from gateway.admission.settlements import Settlements
from gateway.errors import RateLimitError, ServiceUnavailableError
from gateway.state.base import LimitCheck, LimitState, Spend, StateStore, StateUnavailable
from gateway.state.memory import MemoryStateStore

log = structlog.get_logger("shunter.limits")
_UNITS = {"requests": "requests per min (RPM)", "tokens": "tokens per min (TPM)"}


@dataclass(frozen=True)
class RateLimit:
    """Requests and tokens allowed per ``period_s`` (a minute unless said otherwise)."""

    rpm: int | None = None
    tpm: int | None = None
    period_s: float = 60.0

    def checks(self, requests: int, tokens: int) -> list[LimitCheck]:
        """The store checks for taking ``requests`` and ``tokens`` (negative gives back)."""
        out = []
        if self.rpm is not None:
            out.append(LimitCheck("requests", self.rpm, self.period_s, requests))
        if self.tpm is not None:
            out.append(LimitCheck("tokens", self.tpm, self.period_s, tokens))
        return out


@dataclass(frozen=True)
class Grant:
    """Units taken from one scope's limits; ``local`` when taken from local counters."""

    scope: str
    limit: RateLimit
    tokens: int
    local: bool
    states: tuple[LimitState, ...]


class LimitExceededError(RateLimitError):
    """429 that also carries the ``x-ratelimit-*`` headers of the limit that refused."""

    def __init__(self, message: str, *, states: Iterable[LimitState], **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.states = tuple(states)

    def headers(self) -> dict[str, str]:
        return {**ratelimit_headers(self.states), **super().headers()}


class DeploymentLimitedError(LimitExceededError):
    """A deployment's own RPM/TPM refused the request before any upstream attempt.

    Dispatch should move on to the next candidate without retrying this one and without
    telling its circuit breaker (the deployment was never contacted); when every
    candidate refuses, the client gets this 429 with ``retry-after``.
    """

    def __init__(self, deployment: str, cause: LimitExceededError) -> None:
        super().__init__(
            cause.message,
            states=cause.states,
            retry_after=cause.retry_after,
            should_retry=cause.should_retry,
        )
        self.deployment = deployment


@dataclass
class LimiterStats:
    """Counters for the metrics owner: decisions on shared and local counters, refusals."""

    shared: int = 0
    local_fallbacks: int = 0
    rejected: int = 0


class Limiter:
    """Per-scope RPM/TPM on a store, with a local fallback while that store is down."""

    def __init__(self, store: StateStore, *, local: StateStore | None = None) -> None:
        self.store = store
        self.local = local if local is not None else MemoryStateStore()
        self.stats = LimiterStats()

    async def reserve(self, scope: str, label: str, limit: RateLimit, tokens: int) -> Grant:
        """Take one request and ``tokens`` from ``scope``, or raise :class:`LimitExceededError`.

        ``label`` names the limit's owner in the error (``key 'ci'``, ``deployment 'gpu-a'``).
        """
        checks = limit.checks(1, tokens)
        if not checks:
            return Grant(scope, limit, tokens, local=False, states=())
        local = False
        try:
            outcome = await self.store.reserve(scope, checks)
            self.stats.shared += 1
        except StateUnavailable:
            local = True
            self.stats.local_fallbacks += 1
            outcome = await self.local.reserve(scope, checks)
        if not outcome.allowed:
            self.stats.rejected += 1
            raise _refusal(label, checks, outcome.states, outcome.retry_after_s)
        return Grant(scope, limit, tokens, local, outcome.states)

    async def reconcile(self, grant: Grant, actual_tokens: int) -> None:
        """Replace the reserved token count by what was actually used."""
        delta = actual_tokens - grant.tokens
        tokens = [c for c in grant.limit.checks(0, delta) if c.name == "tokens"]
        if delta and tokens:
            await self._adjust(grant, tokens)

    async def release(self, grant: Grant) -> None:
        """Give back everything the grant took (the request was refused before any work)."""
        checks = grant.limit.checks(-1, -grant.tokens)
        if checks:
            await self._adjust(grant, checks)

    async def _adjust(self, grant: Grant, checks: list[LimitCheck]) -> None:
        target = self.local if grant.local else self.store
        try:
            await target.adjust(grant.scope, checks)
        except StateUnavailable:
            # the shared counters will drift back on their own as their TAT passes
            log.debug("limit_adjust_skipped", scope=grant.scope)


def _refusal(
    label: str,
    checks: list[LimitCheck],
    states: tuple[LimitState, ...],
    retry_after: float | None,
) -> LimitExceededError:
    too_big = next((c for c in checks if c.cost > c.limit), None)
    if too_big is not None:
        return LimitExceededError(
            f"Request too large for {label} on {_UNITS.get(too_big.name, too_big.name)}: "
            f"Limit {too_big.limit}, Requested {too_big.cost}. "
            "Lower max_tokens or shorten the prompt.",
            states=states,
            should_retry=False,
        )
    # the limit that refused is the one that needs the longest wait
    binding = max(states, key=lambda s: s.reset_s + _cost_s(checks, s))
    wait = retry_after if retry_after is not None else binding.reset_s
    return LimitExceededError(
        f"Rate limit reached for {label} on {_UNITS.get(binding.name, binding.name)}: "
        f"Limit {binding.limit}, Remaining {binding.remaining}. "
        f"Please try again in {format_duration(wait)}.",
        states=states,
        retry_after=wait,
    )


def _cost_s(checks: list[LimitCheck], state: LimitState) -> float:
    check = next(c for c in checks if c.name == state.name)
    return (check.cost - check.limit) * check.period_s / check.limit


def ratelimit_headers(states: Iterable[LimitState]) -> dict[str, str]:
    """OpenAI's ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``; when several
    limits apply, each kind reports the one with the least remaining."""
    tightest: dict[str, LimitState] = {}
    for state in states:
        held = tightest.get(state.name)
        if held is None or state.remaining < held.remaining:
            tightest[state.name] = state
    out: dict[str, str] = {}
    for name in ("requests", "tokens"):
        if name in tightest:
            held = tightest[name]
            out[f"x-ratelimit-limit-{name}"] = str(held.limit)
            out[f"x-ratelimit-remaining-{name}"] = str(held.remaining)
            out[f"x-ratelimit-reset-{name}"] = format_duration(held.reset_s)
    return out


def format_duration(seconds: float) -> str:
    """A duration as OpenAI writes resets: ``20ms``, ``1.5s``, ``6m0s``."""
    if seconds < 1:
        return f"{max(0, math.ceil(seconds * 1000))}ms"
    minutes, rest = divmod(seconds, 60)
    text = f"{rest:.3f}".rstrip("0").rstrip(".") + "s"
    return f"{int(minutes)}m{text}" if minutes else text


@dataclass
class BudgetStats:
    """Counters for the metrics owner; ``unrecorded_usd`` waits for the store to return."""

    exhausted: int = 0
    held_back: int = 0
    unavailable: int = 0
    unrecorded_usd: float = 0.0


class Budgets:
    """Money per scope and window: held for each request before it runs (its worst case),
    settled to what it cost after. A request is let in while what is spent plus what
    requests in flight hold is under the budget, so the spend passes the budget by at
    most one request's hold (and by what requests cost beyond their holds, when a prompt
    estimate falls short). A hold lapses after ``hold_ttl_s`` if its process dies."""

    def __init__(self, store: StateStore, *, hold_ttl_s: float = 900.0) -> None:
        self.store = store
        self.hold_ttl_s = hold_ttl_s
        self.stats = BudgetStats()
        self.settlements = Settlements(give_up_s=hold_ttl_s)

    async def check(self, scope: str, label: str, budget_usd: float, window_s: int) -> Spend:
        """The current spend; raise 429 ``insufficient_quota`` (no retry) when exhausted,
        429 (retry soon) when requests in flight hold the rest, 503 ``budget_unavailable``
        when the store cannot say."""
        try:
            spend = await self.store.spend_get(scope, window_s)
        except StateUnavailable as exc:
            raise self._unavailable(label) from exc
        spend = self._with_pending(scope, window_s, spend)
        if spend.usd + spend.held_usd >= budget_usd:
            raise self._refusal(label, budget_usd, spend)
        return spend

    async def hold(
        self, scope: str, label: str, budget: tuple[float, int], hold_id: str, usd: float
    ) -> Spend:
        """Hold ``usd`` of ``budget`` (dollars, window seconds) for one request, atomically
        with the check that the budget is not used up; or raise as :meth:`check` does."""
        budget_usd, window_s = budget
        pending = self.settlements.usd(scope, window_s)
        try:
            held = await self.store.spend_hold(
                scope, window_s, hold_id, usd, self.hold_ttl_s, budget_usd=budget_usd - pending
            )
        except StateUnavailable as exc:
            raise self._unavailable(label) from exc
        spend = self._with_pending(scope, window_s, held.spend)
        if not held.allowed:
            raise self._refusal(label, budget_usd, spend)
        return spend

    async def rehold(self, scope: str, window_s: int, hold_id: str, usd: float) -> None:
        """Change what a request already let in holds (it moved to another deployment),
        without a check: it was admitted. A store that is down keeps the old hold."""
        try:
            await self.store.spend_hold(scope, window_s, hold_id, usd, self.hold_ttl_s)
        except StateUnavailable:
            log.debug("budget_rehold_skipped", scope=scope)

    async def add(self, scope: str, window_s: int, usd: float, hold_id: str = "") -> None:
        """Record spend and drop the request's hold (``hold_id`` also makes the write count
        once however often it is retried); if the store is down, keep the settlement and
        retry it until the store is back (see :mod:`gateway.admission.settlements`)."""
        if usd <= 0 and not hold_id:
            return
        amount = max(usd, 0.0)

        async def write() -> Spend:
            return await self.store.spend_settle(scope, window_s, hold_id, amount)

        try:
            await write()
        except StateUnavailable:
            self.settlements.keep("budget", scope, window_s, amount, write)
        else:
            await self.settlements.flush()
        self.stats.unrecorded_usd = self.settlements.total_usd

    def _with_pending(self, scope: str, window_s: int, spend: Spend) -> Spend:
        pending = self.settlements.usd(scope, window_s)
        return replace(spend, usd=spend.usd + pending) if pending else spend

    def _unavailable(self, label: str) -> ServiceUnavailableError:
        self.stats.unavailable += 1
        return ServiceUnavailableError(
            f"The budget of {label} cannot be checked right now "
            "(the state store is unavailable); requests with a budget are refused.",
            code="budget_unavailable",
            retry_after=5,
            should_retry=True,
        )

    def _refusal(self, label: str, budget_usd: float, spend: Spend) -> RateLimitError:
        """Spent: no retry until the window resets. Held by requests in flight: soon."""
        if spend.usd >= budget_usd:
            self.stats.exhausted += 1
            resets = datetime.fromtimestamp(spend.window_end, UTC).isoformat()
            return RateLimitError(
                f"You exceeded the budget of {label}: ${spend.usd:.4f} of ${budget_usd:.2f} "
                f"spent in this window. It resets at {resets}.",
                code="insufficient_quota",
                should_retry=False,
            )
        self.stats.held_back += 1
        return RateLimitError(
            f"The budget of {label} is held by requests in flight: ${spend.usd:.4f} "
            f"spent and ${spend.held_usd:.4f} held of ${budget_usd:.2f}. "
            "Please try again when they finish.",
            retry_after=1.0,
            should_retry=True,
        )
