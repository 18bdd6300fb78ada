"""Dispatch: pick deployments for a public model name and run the request on them.

Retries and fallback happen only before anything has been sent to the client: a stream is
"opened" by pulling its first chunk, and only a failure up to that point is retried on the
same deployment (with back-off that honours retry-after) or moved to the next candidate.
Errors caused by the request itself (4xx) are never retried. Each deployment has a circuit
breaker; when every candidate's breaker is open the client gets a 503 that says so, with
the time until the first one may be probed again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import structlog

from backends.base import Backend
from backends.registry import create_backend
from gateway.config import GatewayConfig, ModelRoute
from gateway.errors import (
    GatewayError,
    ModelNotFoundError,
    ServiceUnavailableError,
    UpstreamError,
    UpstreamTimeoutError,
)
from gateway.protocol import ModelList
from gateway.protocol.common import Model
from gateway.reliability import CircuitBreaker, backoff_delay

T = TypeVar("T")
log = structlog.get_logger("switchyard.dispatch")


@dataclass
class OpenedStream(Generic[T]):
    """A stream whose first chunk has arrived: safe to commit the HTTP response."""

    backend: Backend
    first: T
    rest: AsyncIterator[T]


class Gateway:
    """Holds the live config and its backends; routes requests to them."""

    def __init__(self, config: GatewayConfig, backends: dict[str, Backend]) -> None:
        self.config = config
        self.backends = backends
        self.ready = False
        self.draining = False
        settings = config.reliability
        self.breakers = {
            name: CircuitBreaker(
                settings.failure_threshold, settings.cooldown_s, settings.max_cooldown_s
            )
            for name in backends
        }

    @classmethod
    def from_config(cls, config: GatewayConfig) -> Gateway:
        return cls(config, {d.name: create_backend(d) for d in config.deployments})

    async def start(self) -> None:
        await asyncio.gather(*(b.start() for b in self.backends.values()))
        self.ready = True

    async def aclose(self) -> None:
        self.ready = False
        await asyncio.gather(*(b.aclose() for b in self.backends.values()))

    def model_list(self) -> ModelList:
        return ModelList(data=[Model(id=name) for name in self.config.models])

    def route(self, model: str) -> ModelRoute:
        route = self.config.models.get(model)
        if route is None:
            raise ModelNotFoundError(
                f"The model '{model}' does not exist or you do not have access to it.",
                param="model",
            )
        return route

    def candidates(self, model: str) -> list[Backend]:
        """Deployments for ``model`` in the order the route's policy ranks them."""
        route = self.route(model)
        ordered = [self.backends[name] for name in route.candidates]
        return ordered if route.fallback else ordered[:1]

    async def call(
        self, model: str, attempt: Callable[[Backend], Awaitable[T]]
    ) -> tuple[Backend, T]:
        """Run a whole (non-streaming) request, with retries and fallback."""

        async def bounded(backend: Backend) -> T:
            return await _within(self._timeouts(backend)[1], attempt(backend), backend)

        return await self._first_success(self.candidates(model), bounded)

    async def open_stream(
        self, model: str, start: Callable[[Backend], AsyncIterator[T]]
    ) -> OpenedStream[T]:
        """Start a stream and wait for its first chunk, retrying and falling back until then."""

        async def first_chunk(backend: Backend) -> tuple[T, AsyncIterator[T]]:
            first_token_s, total_s = self._timeouts(backend)
            iterator = start(backend)
            if total_s is not None:
                iterator = _with_deadline(iterator, total_s, backend)
            try:
                return await _within(first_token_s, anext(iterator), backend), iterator
            except BaseException:
                await _aclose(iterator)
                raise

        backend, (first, rest) = await self._first_success(self.candidates(model), first_chunk)
        return OpenedStream(backend, first, rest)

    def _timeouts(self, backend: Backend) -> tuple[float | None, float | None]:
        timeouts = self.config.deployment(backend.name).timeouts
        return timeouts.first_token_s, timeouts.total_s

    async def _first_success(
        self, candidates: Sequence[Backend], attempt: Callable[[Backend], Awaitable[T]]
    ) -> tuple[Backend, T]:
        settings = self.config.reliability
        last: GatewayError | None = None
        tried = False
        for backend in candidates:
            breaker = self.breakers[backend.name]
            for retry in range(settings.retries + 1):
                if not breaker.allow():
                    break
                tried = True
                try:
                    result = await _attempt_once(backend, breaker, attempt)
                except GatewayError as exc:
                    if not exc.counts_as_failure:
                        raise
                    last = exc
                    delay = backoff_delay(retry, exc.retry_after, settings)
                    if retry == settings.retries or delay > settings.max_retry_after_s:
                        break
                    await asyncio.sleep(delay)
                else:
                    return backend, result
        if not tried:
            raise _all_cooling_down(candidates, self.breakers)
        assert last is not None
        raise last


async def _attempt_once(
    backend: Backend, breaker: CircuitBreaker, attempt: Callable[[Backend], Awaitable[T]]
) -> T:
    """One try; the outcome goes to the breaker. Request errors (4xx) propagate at once."""
    recorded = False
    try:
        result = await attempt(backend)
        breaker.record_success()
        recorded = True
        return result
    except StopAsyncIteration as exc:
        breaker.record_failure()
        recorded = True
        raise UpstreamError(f"deployment {backend.name!r} returned an empty stream") from exc
    except GatewayError as exc:
        if not exc.counts_as_failure:
            breaker.record_success()  # it answered; the request was at fault
            recorded = True
            raise
        breaker.record_failure()
        recorded = True
        log.warning(
            "deployment_failed",
            deployment=backend.name,
            error=exc.message,
            breaker=breaker.state,
        )
        raise
    finally:
        if not recorded:  # cancelled: a half-open probe must not stay reserved
            breaker.record_abandoned()


def _all_cooling_down(
    candidates: Sequence[Backend], breakers: dict[str, CircuitBreaker]
) -> ServiceUnavailableError:
    wait = min(breakers[b.name].retry_in() for b in candidates)
    names = ", ".join(b.name for b in candidates)
    return ServiceUnavailableError(
        f"Every deployment for this model is cooling down after failures ({names}); "
        f"the next probe is in {wait:.1f}s.",
        code="deployments_cooling_down",
        retry_after=max(wait, 1.0),
    )


async def _within(limit_s: float | None, awaitable: Awaitable[T], backend: Backend) -> T:
    if limit_s is None:
        return await awaitable
    try:
        async with asyncio.timeout(limit_s):
            return await awaitable
    except TimeoutError as exc:
        raise UpstreamTimeoutError(
            f"deployment {backend.name!r} did not answer within {limit_s:g}s"
        ) from exc


async def _with_deadline(
    chunks: AsyncIterator[T], total_s: float | None, backend: Backend
) -> AsyncIterator[T]:
    """Pass chunks through; past ``total_s`` end with a timeout error (in-band for clients)."""
    deadline = None if total_s is None else time.monotonic() + total_s
    try:
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise UpstreamTimeoutError(f"deployment {backend.name!r} exceeded {total_s:g}s")
            try:
                chunk = await _within(remaining, anext(chunks), backend)
            except StopAsyncIteration:
                return
            yield chunk
    finally:
        await _aclose(chunks)


async def _aclose(iterator: AsyncIterator[object]) -> None:
    close = getattr(iterator, "aclose", None)
    if close is not None:
        await close()
