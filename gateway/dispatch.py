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
import contextlib
import hashlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import structlog
from opentelemetry import trace

from backends.base import Backend, Price
from backends.registry import DeploymentConfig, create_backend
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


@dataclass(frozen=True)
class Candidate:
    """A deployment as the config in force when routing began describes it."""

    backend: Backend
    settings: DeploymentConfig
    breaker: CircuitBreaker


@dataclass
class OpenedStream(Generic[T]):
    """A stream whose first chunk has arrived: safe to commit the HTTP response."""

    candidate: Candidate
    first: T
    rest: AsyncIterator[T]

    @property
    def backend(self) -> Backend:
        return self.candidate.backend


class Gateway:
    """Holds the live config and its backends; routes requests to them."""

    def __init__(self, config: GatewayConfig, backends: dict[str, Backend]) -> None:
        self.config = config
        self.backends = backends
        self.ready = False
        self.draining = False
        self.tracer: trace.Tracer = trace.NoOpTracer()
        self._retiring: set[asyncio.Task[None]] = set()
        self.breakers = {name: _breaker(config) for name in backends}

        self.config_version = config_version(config)

    @classmethod
    def from_config(cls, config: GatewayConfig) -> Gateway:
        return cls(config, {d.name: create_backend(d) for d in config.deployments})

    async def apply(self, config: GatewayConfig, drain_timeout_s: float = 60.0) -> None:
        """Switch to a new config for new requests; in-flight ones finish where they are.

        Deployments whose settings did not change keep their backend (and its loaded model
        and breaker). New or changed ones are started first: if one fails to start, the
        reload is abandoned and the current config keeps serving.
        """
        keep = {
            d.name: self.backends[d.name]
            for d in config.deployments
            if d.name in self.backends and _same(self.config, d)
        }
        fresh = {d.name: create_backend(d) for d in config.deployments if d.name not in keep}
        try:
            await asyncio.gather(*(b.start() for b in fresh.values()))
        except BaseException:
            await asyncio.gather(*(b.aclose() for b in fresh.values()), return_exceptions=True)
            raise
        retired = [b for name, b in self.backends.items() if keep.get(name) is not b]
        self.breakers = {
            **{name: self.breakers[name] for name in keep},
            **{name: _breaker(config) for name in fresh},
        }
        self.config, self.backends = config, {**keep, **fresh}
        self.config_version = config_version(config)
        for backend in retired:
            self._retire(backend, drain_timeout_s)

    def _retire(self, backend: Backend, drain_timeout_s: float) -> None:
        async def close_when_idle() -> None:
            deadline = time.monotonic() + drain_timeout_s
            while backend.stats().in_flight and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            await backend.aclose()

        task = asyncio.get_running_loop().create_task(close_when_idle())
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def start(self) -> None:
        await asyncio.gather(*(b.start() for b in self.backends.values()))
        self.ready = True

    async def aclose(self) -> None:
        self.ready = False
        await asyncio.gather(*self._retiring, return_exceptions=True)
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

    def candidates(self, model: str) -> list[Candidate]:
        """Deployments for ``model`` in the order the route's policy ranks them."""
        route = self.route(model)
        config = self.config
        ordered = [
            Candidate(self.backends[name], config.deployment(name), self.breakers[name])
            for name in route.candidates
        ]
        return ordered if route.fallback else ordered[:1]

    async def call(
        self, model: str, attempt: Callable[[Backend], Awaitable[T]], operation: str = "chat"
    ) -> tuple[Candidate, T]:
        """Run a whole (non-streaming) request, with retries and fallback."""

        async def bounded(candidate: Candidate) -> T:
            limit = candidate.settings.timeouts.total_s
            return await _within(limit, attempt(candidate.backend), candidate.backend)

        return await self._first_success(self.candidates(model), bounded, operation)

    async def open_stream(
        self, model: str, start: Callable[[Backend], AsyncIterator[T]], operation: str = "chat"
    ) -> OpenedStream[T]:
        """Start a stream and wait for its first chunk, retrying and falling back until then."""

        async def first_chunk(candidate: Candidate) -> tuple[T, AsyncIterator[T]]:
            backend, timeouts = candidate.backend, candidate.settings.timeouts
            first_token_s, total_s = timeouts.first_token_s, timeouts.total_s
            iterator = start(backend)
            if total_s is not None:
                iterator = _with_deadline(iterator, total_s, backend)
            try:
                return await _within(first_token_s, anext(iterator), backend), iterator
            except BaseException:
                await _aclose(iterator)
                raise

        candidates = self.candidates(model)
        chosen, (first, rest) = await self._first_success(candidates, first_chunk, operation)
        return OpenedStream(chosen, first, rest)

    async def _first_success(
        self,
        candidates: Sequence[Candidate],
        attempt: Callable[[Candidate], Awaitable[T]],
        operation: str,
    ) -> tuple[Candidate, T]:
        settings = self.config.reliability
        last: GatewayError | None = None
        tried = False
        for candidate in candidates:
            breaker = candidate.breaker
            for retry in range(settings.retries + 1):
                if not breaker.allow():
                    break
                tried = True
                try:
                    with self._client_span(operation, candidate, retry):
                        result = await _attempt_once(candidate, attempt)
                except GatewayError as exc:
                    if not exc.counts_as_failure:
                        raise
                    last = exc
                    delay = backoff_delay(retry, exc.retry_after, settings)
                    if retry == settings.retries or delay > settings.max_retry_after_s:
                        break
                    await asyncio.sleep(delay)
                else:
                    return candidate, result
        if not tried:
            raise _all_cooling_down(candidates)
        assert last is not None
        raise last

    def _client_span(self, operation: str, candidate: Candidate, retry: int) -> Any:
        """One span per upstream attempt, in GenAI terms."""
        deployment = candidate.settings
        span = self.tracer.start_as_current_span(
            f"{operation} {deployment.model}", kind=trace.SpanKind.CLIENT
        )
        attributes = {
            "gen_ai.operation.name": operation,
            "gen_ai.provider.name": deployment.backend,
            "gen_ai.request.model": deployment.model,
            "switchyard.deployment": deployment.name,
            "switchyard.attempt": retry,
        }
        return _with_attributes(span, attributes)


@contextlib.contextmanager
def _with_attributes(span_cm: Any, attributes: dict[str, Any]) -> Iterator[trace.Span]:
    with span_cm as span:
        span.set_attributes(attributes)
        try:
            yield span
        except GatewayError as exc:
            span.set_attribute("error.type", type(exc).__name__)
            raise


def cost_usd(price: Price | None, prompt_tokens: int, completion_tokens: int) -> float:
    """What a request cost at a deployment's price (0 when it has none)."""
    if price is None:
        return 0.0
    return (prompt_tokens * price.input_per_1m + completion_tokens * price.output_per_1m) / 1e6


def _breaker(config: GatewayConfig) -> CircuitBreaker:
    settings = config.reliability
    return CircuitBreaker(settings.failure_threshold, settings.cooldown_s, settings.max_cooldown_s)


def config_version(config: GatewayConfig) -> str:
    """A short, stable fingerprint of a config, reported by readiness."""
    return hashlib.sha256(config.model_dump_json().encode()).hexdigest()[:12]


def _same(config: GatewayConfig, deployment: DeploymentConfig) -> bool:
    return any(d == deployment for d in config.deployments)


async def _attempt_once(candidate: Candidate, attempt: Callable[[Candidate], Awaitable[T]]) -> T:
    """One try; the outcome goes to the breaker. Request errors (4xx) propagate at once."""
    backend, breaker = candidate.backend, candidate.breaker
    recorded = False
    try:
        result = await attempt(candidate)
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


def _all_cooling_down(candidates: Sequence[Candidate]) -> ServiceUnavailableError:
    wait = min(c.breaker.retry_in() for c in candidates)
    names = ", ".join(c.settings.name for c in candidates)
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
