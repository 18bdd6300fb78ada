"""One attempt on one deployment, and the errors that say why none could serve.

Every try goes through :func:`attempt_once`, which reports its outcome to the deployment's
circuit breaker and live figures; 4xx errors caused by the request say nothing about the
deployment.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import structlog

from backends.base import Backend
from backends.registry import DeploymentConfig
from gateway.dispatch.health.breakers import CircuitBreaker
from gateway.dispatch.health.live import Attempt, DeploymentTracker
from gateway.errors import (
    ContextLengthExceededError,
    GatewayError,
    InvalidRequestError,
    RateLimitError,
    ServiceUnavailableError,
    StreamCutError,
    UpstreamTimeoutError,
)
from policies import Candidate as PolicyCandidate
from policies import RequestFacts

T = TypeVar("T")
log = structlog.get_logger("shunter.dispatch")


@dataclass(frozen=True)
class Candidate:
    """A deployment as the config in force when routing began describes it."""

    backend: Backend
    settings: DeploymentConfig
    breaker: CircuitBreaker
    tracker: DeploymentTracker


async def attempt_once(
    candidate: Candidate, attempt: Callable[[Candidate], Awaitable[T]], request: RequestFacts
) -> tuple[T, Attempt]:
    """One try; the outcome goes to the breaker and the live figures. Request errors
    (4xx) propagate at once and say nothing about the deployment."""
    backend, breaker = candidate.backend, candidate.breaker
    tracked = candidate.tracker.begin(
        request.prompt_tokens, request.prefix_chain, request.session_id
    )
    recorded = False
    try:
        result = await attempt(candidate)
        breaker.record_success()
        tracked.first_token()
        recorded = True
        return result, tracked
    except StopAsyncIteration as exc:
        recorded = True
        tracked.finish(None, failed=True)
        await breaker.fail()
        raise StreamCutError(f"deployment {backend.name!r} returned an empty stream") from exc
    except GatewayError as exc:
        recorded = True
        if not exc.counts_as_failure:
            breaker.record_success()  # it answered; the request was at fault
            tracked.finish(None)
            raise
        tracked.finish(None, failed=True)
        await breaker.fail(down=not isinstance(exc, RateLimitError))
        log.warning(
            "deployment_failed", deployment=backend.name, error=exc.message, breaker=breaker.state
        )
        raise
    finally:
        if not recorded:  # cancelled or an unexpected error: free a half-open probe
            breaker.record_abandoned()
            tracked.finish(None, failed=True)


def nothing_can_serve(
    model: str, facts: RequestFacts, pool: Sequence[PolicyCandidate], reason: str
) -> GatewayError:
    need = facts.prompt_tokens + (facts.max_tokens or 0)
    limits = [c.facts.capabilities.context_length for c in pool]
    if limits and all(limit is not None and need > limit for limit in limits):
        largest = max(filter(None, limits))
        error = ContextLengthExceededError(
            f"This model's maximum context length is {largest} tokens; "
            f"this request needs about {need} (prompt + max_tokens).",
            param="messages",
        )
        error.prompt_tokens, error.max_tokens = facts.prompt_tokens, facts.max_tokens or 0
        error.limit = largest
        return error
    return InvalidRequestError(
        f"No deployment of '{model}' can serve this request ({reason}).",
        code="no_capable_deployment",
    )


def all_cooling_down(candidates: Sequence[Candidate]) -> ServiceUnavailableError:
    wait = min(c.breaker.retry_in() for c in candidates)
    names = ", ".join(c.settings.name for c in candidates)
    return ServiceUnavailableError(
        f"Every deployment for this model is cooling down after failures ({names}); "
        f"the next probe is in {wait:.1f}s.",
        code="deployments_cooling_down",
        retry_after=max(wait, 1.0),
    )


async def within(
    limit_s: float | None,
    awaitable: Awaitable[T],
    backend: Backend,
    error: type[UpstreamTimeoutError] = UpstreamTimeoutError,
) -> T:
    """``awaitable``'s result, or ``error`` (a timeout) once ``limit_s`` has passed."""
    if limit_s is None:
        return await awaitable
    try:
        async with asyncio.timeout(limit_s):
            return await awaitable
    except TimeoutError as exc:
        raise error(f"deployment {backend.name!r} did not answer within {limit_s:g}s") from exc
