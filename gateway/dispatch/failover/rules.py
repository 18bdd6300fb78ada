"""Failover: one request's attempts along its candidates, before anything reached the client.

For each candidate in the policy's order:

* its breaker must allow it (else: ``breaker_open``), and its own rpm/tpm must admit the
  request (else: ``limited``);
* a failure that says something about the deployment is retried there (back-off from
  :mod:`gateway.dispatch.health.breakers`) unless it used up its time (a timeout or a stall),
  it says a retry cannot help (``x-should-retry: false``: rejected credentials, a spent
  quota), or it is busy (429, 503/529) while another candidate whose breaker is not open
  can take the request at once: a rate-limited deployment is left for the next one rather
  than pressed again;
* a context-length rejection is never resent there: the deployment's limit is learned
  (:mod:`gateway.dispatch.health.learned`) and the request moves on to the next candidate whose
  context is larger or unknown (``context_fallback``); with none left the client gets one
  clean 400 ``context_length_exceeded`` naming the largest limit;
* any other error the request caused (4xx) ends it at once.

:class:`Trail` records each candidate the request left and why; it becomes the
``x-shunter-route`` header (``b after a: rate_limited; policy: ...``) and the per-deployment
fallback tallies behind ``shunter_fallbacks_total``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar, get_args, overload

from backends.base import Price
from gateway.admission.limits import DeploymentLimitedError
from gateway.config import ReliabilitySettings
from gateway.dispatch.failover.attempts import Candidate, all_cooling_down, attempt_once
from gateway.dispatch.health.breakers import backoff_delay, spacing_delay
from gateway.dispatch.health.learned import ContextLimits, context_limit_in
from gateway.dispatch.health.live import Attempt
from gateway.errors import (
    ContextLengthExceededError,
    GatewayError,
    RateLimitError,
    ServiceUnavailableError,
    StalledError,
    StreamCutError,
    UpstreamTimeoutError,
)
from gateway.protocol.frames import Chunks, Stream
from gateway.telemetry.tracing import note_tried
from policies import Hedge, Ranked, RequestFacts

T = TypeVar("T")
Admit = Callable[[Candidate], Awaitable[None]]
Span = Callable[[Candidate, int], AbstractContextManager[object]]
Cause = Literal[
    "context_length",
    "rate_limited",
    "overloaded",
    "unavailable",
    "stalled",
    "timeout",
    "cut",
    "error",
    "breaker_open",
    "limited",
]
CAUSES: tuple[Cause, ...] = get_args(Cause)
_BUSY: frozenset[Cause] = frozenset(("rate_limited", "overloaded"))


def cause_of(exc: GatewayError) -> Cause:
    """Why a deployment failed a request, as one of :data:`CAUSES`."""
    if isinstance(exc, ContextLengthExceededError):
        return "context_length"
    if isinstance(exc, DeploymentLimitedError):
        return "limited"
    if isinstance(exc, RateLimitError):
        return "rate_limited"
    if isinstance(exc, StalledError):
        return "stalled"
    if isinstance(exc, UpstreamTimeoutError):
        return "timeout"
    if isinstance(exc, StreamCutError):
        return "cut"
    if exc.upstream_status in (503, 529):
        return "overloaded"
    if isinstance(exc, ServiceUnavailableError):
        return "unavailable"
    return "error"


@dataclass
class Trail:
    """The candidates one request left before it was answered, and why."""

    left: list[tuple[str, Cause]] = field(default_factory=list)
    moves: list[str] = field(default_factory=list)
    """What was done with the request's KV cache before an attempt (moved, skipped,
    failed), in words (:mod:`gateway.dispatch.routing.moving`)."""

    def leave(self, candidate: Candidate, cause: Cause, *, fallback: bool) -> None:
        """Note that the request left ``candidate``; ``fallback``: for another candidate."""
        self.left.append((candidate.settings.name, cause))
        if fallback:
            candidate.breaker.fallbacks[cause] += 1

    def route(self, answered: str, reason: str, max_chars: int = 200) -> str:
        """The ``x-shunter-route`` value: the policy's reason, after the fallbacks if any,
        then what was done with the KV cache."""
        moves = "".join(f"; {move}" for move in self.moves)
        if not self.left:
            return reason + moves
        failed = ", ".join(f"{name}: {cause}" for name, cause in self.left)
        text = f"{answered} after {failed}; policy: {reason}"
        text = text.encode("ascii", "replace").decode("ascii")
        text = text if len(text) <= max_chars else text[: max_chars - 3] + "..."
        return text + moves


class InOrder(Sequence[Candidate]):
    """The deployments of ranked policy candidates, looked up as they are read: most
    requests read only the first (over a large fleet, the rest is never built)."""

    __slots__ = ("_of", "_ranked")

    def __init__(self, ranked: Sequence[Ranked], of: Callable[[str], Candidate]) -> None:
        self._ranked = ranked
        self._of = of

    def __len__(self) -> int:
        return len(self._ranked)

    @overload
    def __getitem__(self, index: int) -> Candidate: ...

    @overload
    def __getitem__(self, index: slice) -> InOrder: ...

    def __getitem__(self, index: int | slice) -> Candidate | InOrder:
        if isinstance(index, slice):  # lazy too: the dispatcher takes "the rest" each try
            return InOrder(self._ranked[index], self._of)
        return self._of(self._ranked[index].candidate.facts.name)


@dataclass(frozen=True)
class Routing:
    """A policy's decision for one request: candidates in order, why, and what happened."""

    candidates: Sequence[Candidate]
    reason: str
    request: RequestFacts
    hedge: Hedge | None = None
    trail: Trail = field(default_factory=Trail)
    context_fallback: bool = True
    retry_after_wait_s: float = 0.0
    """A busy deployment asking to wait this long or less is waited for rather than left
    for a candidate of another model or a dearer one."""


@dataclass
class Opening:
    """An attempt's stream once its first piece arrived: ``first``, then ``stream``;
    ``source``, when the stream is one of chat chunks; ``framed``: its pieces are OpenAI
    chunk frames (a resume can read them back); ``sending``: what the deployment was sent
    (:class:`~gateway.dispatch.work.Sending`, when the attempt was planned)."""

    first: Any
    stream: Stream[Any]
    source: Chunks | None = None
    framed: bool = False
    sending: Any = None


@dataclass(frozen=True)
class OpenedStream:
    """A stream whose first frame has arrived: the failover is over.

    Whoever consumes ``rest`` reports the end through ``attempt.finish(tokens)``. ``reason``
    says why this candidate (``b after a: rate_limited; policy: ...``); ``routing`` is the
    decision, whose other candidates may continue the stream if it fails. ``first`` and
    ``rest`` are frames, or chat chunks read from ``source``."""

    candidate: Candidate
    first: Any
    rest: Stream[Any]
    reason: str
    attempt: Attempt
    routing: Routing
    source: Chunks | None = None


@dataclass(frozen=True)
class Failover:
    """What the attempts of every request share: the settings and the learned limits."""

    settings: ReliabilitySettings
    limits: ContextLimits

    async def first_success(
        self,
        routing: Routing,
        attempt: Callable[[Candidate], Awaitable[T]],
        span: Span,
        admit: Admit | None = None,
        prepare: Admit | None = None,
    ) -> tuple[Candidate, tuple[T, Attempt]]:
        """The first candidate that answers, with its answer; else the error to send.
        ``span`` wraps each attempt (a trace span, or nothing); ``prepare`` runs once per
        candidate admitted, before its first attempt (a KV move to it)."""
        return await _Run(self, routing, attempt, span, admit, prepare).run()


class _Run(Generic[T]):
    """One request's walk along its candidates."""

    def __init__(
        self,
        failover: Failover,
        routing: Routing,
        attempt: Callable[[Candidate], Awaitable[T]],
        span: Span,
        admit: Admit | None,
        prepare: Admit | None = None,
    ) -> None:
        self.failover, self.routing, self.attempt = failover, routing, attempt
        self.span, self.admit, self.prepare = span, admit, prepare
        self.last: GatewayError | None = None
        self.cause: Cause = "error"
        self.tried = False
        self.exceeded: int | None = None  # a context length this request is known not to fit
        self.named_limits: list[int] = []  # limits the rejections named, for the final 400

    async def run(self) -> tuple[Candidate, tuple[T, Attempt]]:
        candidates = self.routing.candidates
        for index, candidate in enumerate(candidates):
            rest = candidates[index + 1 :]
            if self._fits(candidate):
                answer = await self._on(candidate, rest)
                if answer is not None:
                    return candidate, answer
            else:
                self.cause = "context_length"
            self.routing.trail.leave(candidate, self.cause, fallback=bool(rest))
        raise self._final_error()

    async def _on(
        self, candidate: Candidate, rest: Sequence[Candidate]
    ) -> tuple[T, Attempt] | None:
        """Try one candidate, with retries; its answer, or ``None`` to move on."""
        settings, breaker = self.failover.settings, candidate.breaker
        started: list[float] = []
        for retry in range(settings.retries + 1):
            if not await breaker.admit():
                self.cause = "breaker_open" if retry == 0 else self.cause
                return None
            if retry == 0 and self.admit is not None:
                try:
                    await self.admit(candidate)
                except DeploymentLimitedError as exc:
                    breaker.record_abandoned()  # never contacted: its own limit is full
                    note_tried(candidate.settings.name)  # its 429 counts under its name
                    self.last, self.cause = exc, "limited"
                    return None
            if retry == 0 and self.prepare is not None:
                await self.prepare(candidate)
            self.tried = True
            started.append(time.monotonic())
            try:
                with self.span(candidate, retry):
                    return await attempt_once(candidate, self.attempt, self.routing.request)
            except GatewayError as exc:
                self.last, self.cause = exc, cause_of(exc)
                if self.cause == "context_length":
                    self._too_long(candidate, exc)  # raises unless it may move on
                    return None
                if not exc.counts_as_failure:
                    raise
                if not self._retry_here(candidate, exc, rest) or retry == settings.retries:
                    return None
                delay = backoff_delay(retry, exc.retry_after, settings)
                if delay > settings.max_retry_after_s:
                    return None
                await asyncio.sleep(max(delay, spacing_delay(started, time.monotonic())))
        return None

    def _retry_here(
        self, candidate: Candidate, exc: GatewayError, rest: Sequence[Candidate]
    ) -> bool:
        """Whether a failed deployment gets another try, or the request moves on now."""
        if isinstance(exc, UpstreamTimeoutError):
            return False  # it used up its time once; the next candidate gets the rest
        if exc.should_retry is False:
            return False  # our credentials, a spent quota: another try cannot help
        if self.cause in _BUSY:  # leave a busy deployment to a candidate free now...
            free = next((c for c in rest if c.breaker.state != "open" and self._fits(c)), None)
            return free is None or self._worth_waiting(candidate, exc, free)
        return True

    def _worth_waiting(self, busy: Candidate, exc: GatewayError, free: Candidate) -> bool:
        """...unless it asks for a short wait and the free one would change the answer's
        model or its price: a client is not moved to a costlier model for a pause."""
        wait = exc.retry_after
        if wait is None or wait > self.routing.retry_after_wait_s:
            return False
        now, then = busy.settings, free.settings
        return then.model != now.model or _per_token(then.price) > _per_token(now.price)

    def _too_long(self, candidate: Candidate, exc: GatewayError) -> None:
        """A context-length rejection: learn the limit; move on, or end the request.

        What is learned feeds ``capable``, which compares the request's *estimated* size:
        the limit the rejection names, or less when the estimate of this request was under
        it (a tokenizer denser than 4 characters a token), so that requests estimated this
        large are skipped next time. Later candidates are skipped within this request only
        on the limit it named (real tokens), or on the estimate when it named none."""
        named = context_limit_in(exc)
        request = self.routing.request
        need = request.prompt_tokens + (request.max_tokens or 0)
        under = need - 1 if need > 1 else None
        bounds = [b for b in (named, under) if b is not None]
        if bounds:
            self.failover.limits.learn(candidate.settings.name, min(bounds))
        exceeded = named if named is not None else under
        if exceeded is not None:
            self.exceeded = max(exceeded, self.exceeded or 0)
        if named is not None:
            self.named_limits.append(named)
        if not self.routing.context_fallback:
            raise exc

    def _fits(self, candidate: Candidate) -> bool:
        """Whether ``candidate``'s context may hold a request known not to fit
        :attr:`exceeded` tokens: larger, or unknown."""
        if self.exceeded is None:
            return True
        name = candidate.settings.name
        known = [
            limit
            for limit in (
                candidate.backend.capabilities.context_length,
                self.failover.limits.get(name),
            )
            if limit is not None
        ]
        return not known or min(known) > self.exceeded

    def _final_error(self) -> GatewayError:
        if not self.tried and self.last is None:
            return all_cooling_down(self.routing.candidates)
        assert self.last is not None
        if self.cause == "context_length" and self.named_limits:
            param = self.last.param or "messages"
            error = ContextLengthExceededError(
                f"This model's maximum context length is {max(self.named_limits)} tokens; "
                "this request does not fit any of its deployments. Shorten the messages or "
                "lower max_tokens.",
                param=param,
            )
            facts = self.routing.request  # the gateway's estimate: upstreams name no prompt
            error.prompt_tokens, error.max_tokens = facts.prompt_tokens, facts.max_tokens or 0
            error.limit = max(self.named_limits)
            return error
        return self.last


def _per_token(price: Price | None) -> float:
    """A price's weight for comparing two deployments: input and output together."""
    return 0.0 if price is None else price.input_per_1m + price.output_per_1m
