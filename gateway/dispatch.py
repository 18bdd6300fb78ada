"""Dispatch: pick deployments for a public model name and run the request on them.

Fallback happens only before anything has been sent to the client: a stream is "opened"
by pulling its first chunk, and only a failure up to that point moves on to the next
candidate. Errors caused by the request itself (4xx) are never retried elsewhere.
"""

from __future__ import annotations

import asyncio
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
    RateLimitError,
    ServiceUnavailableError,
    UpstreamError,
    UpstreamTimeoutError,
)
from gateway.protocol import ModelList
from gateway.protocol.common import Model

T = TypeVar("T")
log = structlog.get_logger("switchyard.dispatch")

# failures that another deployment may not share
_FALLBACK_ON = (ServiceUnavailableError, UpstreamError, UpstreamTimeoutError, RateLimitError)


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
        """Run a whole (non-streaming) request, falling back on deployment failures."""
        return await _first_success(self.candidates(model), attempt)

    async def open_stream(
        self, model: str, start: Callable[[Backend], AsyncIterator[T]]
    ) -> OpenedStream[T]:
        """Start a stream and wait for its first chunk, falling back before it arrives."""

        async def first_chunk(backend: Backend) -> tuple[T, AsyncIterator[T]]:
            iterator = start(backend)
            try:
                return await anext(iterator), iterator
            except BaseException:
                await _aclose(iterator)
                raise

        backend, (first, rest) = await _first_success(self.candidates(model), first_chunk)
        return OpenedStream(backend, first, rest)


async def _first_success(
    candidates: Sequence[Backend], attempt: Callable[[Backend], Awaitable[T]]
) -> tuple[Backend, T]:
    last: GatewayError | None = None
    for backend in candidates:
        try:
            return backend, await attempt(backend)
        except _FALLBACK_ON as exc:
            log.warning("deployment_failed", deployment=backend.name, error=exc.message)
            last = exc
        except StopAsyncIteration:
            last = UpstreamError(f"deployment {backend.name!r} returned an empty stream")
    assert last is not None, "a route always has at least one candidate"
    raise last


async def _aclose(iterator: AsyncIterator[object]) -> None:
    close = getattr(iterator, "aclose", None)
    if close is not None:
        await close()
