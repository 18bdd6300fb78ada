"""The connection to one remote API: whole answers and SSE streams under a deployment's
deadlines, with failures already mapped onto :mod:`gateway.errors`.

Two implementations of :class:`Upstream`:

* :class:`H1Upstream` (what deployments use): the pooled HTTP/1.1 client of
  :mod:`backends.http.h1`, about 25 times less CPU per request than httpx;
* :class:`~backends.http.httpxupstream.HttpxUpstream`: httpx, used when the environment
  names a proxy for the upstream (see :func:`proxied`) and when a test hands the backend
  an ``httpx`` transport (``httpx.MockTransport`` stands in for a managed API); its module
  (and httpx) load only then.
"""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from contextvars import ContextVar
from typing import Any, Protocol
from urllib.parse import urlsplit

from backends.base import Timeouts
from backends.http import h1
from backends.http.errors import (
    error_for_status,
    error_for_transport,
    stalled_error,
    timeout_error,
)
from backends.http.jsonbody import load_json
from backends.http.redact import Redactor
from backends.http.settings import HTTPDeploymentSettings
from backends.http.sse import FrameBatches

USER_AGENT = "shunter/0.1"
KEEPALIVE_S = 30.0
EVENT_STREAM = {"accept": "text/event-stream"}

REQUEST_CONTEXT: ContextVar[Mapping[str, str] | None] = ContextVar(
    "shunter_upstream_request_context", default=None
)
"""Headers that carry the request being served to its upstream: ``x-request-id`` and the
W3C trace context (``traceparent``, ``tracestate``, ``baggage``). The gateway sets them per
request, and per attempt when it records spans; every request an :class:`Upstream` sends
while they are set carries them. A context variable (as OpenTelemetry's own context is),
so that they follow the request through tasks without every backend passing them on."""


Headers = Mapping[str, str] | None
"""Per-request headers besides an upstream's fixed ones (a client's own, passed on)."""


def with_context(extra: Mapping[str, str] | None) -> Mapping[str, str] | None:
    """``extra`` plus the current request's context headers (either may be absent)."""
    context = REQUEST_CONTEXT.get()
    if context is None:
        return extra
    return context if extra is None else {**context, **extra}


def first_byte_limit(timeouts: Timeouts) -> float | None:
    """Seconds a stream may wait for its first byte: ``first_token_s`` capped by ``total_s``."""
    return smallest(timeouts.first_token_s, timeouts.total_s)


def smallest(*limits: float | None) -> float | None:
    """The tightest of some time limits (``None``: no limit)."""
    present = [t for t in limits if t is not None]
    return min(present) if present else None


class Upstream(Protocol):
    """One remote API, pooled; every error raised is a :class:`gateway.errors.GatewayError`
    except those raised while the caller iterates a stream (map them with
    :func:`backends.http.errors.map_transport_errors`). ``redactor`` knows what this
    upstream must not show anyone (the credentials sent to it, its address): pass it to
    the error mapping of anything the upstream says."""

    redactor: Redactor

    async def post(
        self, path: str, body: bytes, total_s: float | None, headers: Headers = None
    ) -> bytes:
        """POST a JSON ``body`` (with ``headers`` besides the fixed ones); the answer's
        bytes, or the upstream's error mapped."""
        ...

    def stream(
        self, path: str, body: bytes, timeouts: Timeouts, headers: Headers = None
    ) -> AbstractAsyncContextManager[FrameBatches]:
        """POST a streaming request and iterate its SSE frames: the first byte within
        ``first_token_s``, each later read as well, the whole stream within ``total_s``."""
        ...

    async def get_json(self, path: str, timeout_s: float) -> Any:
        """GET ``path`` and decode its JSON."""
        ...

    async def status_of(self, path: str, timeout_s: float) -> int | None:
        """GET ``path`` and return its HTTP status; ``None`` when no answer came in time
        (no connection, reset, timeout). Nothing is logged: a health probe asks this."""
        ...

    async def aclose(self) -> None: ...


async def probe(upstream: Upstream, path: str, timeout_s: float) -> bool | None:
    """A health probe: ``True`` when ``GET path`` answers 2xx/3xx; ``False`` when the
    upstream is down (no answer, 401/402/403 (our credentials), 408, 429, 5xx); ``None``
    when it cannot tell (another 4xx: the path is not served there)."""
    status = await upstream.status_of(path, timeout_s)
    if status is None:
        return False
    if status < 400:
        return True
    return False if status in (401, 402, 403, 408, 429) or status >= 500 else None


def proxied(url: str) -> bool:
    """Whether the proxy environment variables route ``url`` through a proxy."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies()
    if not (proxies.get(parts.scheme) or proxies.get("all")):
        return False
    return not urllib.request.proxy_bypass(parts.hostname or "")


def fixed_headers(settings: HTTPDeploymentSettings, headers: Mapping[str, str]) -> dict[str, str]:
    """What every request to the upstream carries; the deployment's own headers win."""
    defaults = {"user-agent": USER_AGENT, "content-type": "application/json"}
    return {**defaults, **headers, **settings.headers}


class H1Upstream:
    """:class:`Upstream` over :class:`backends.http.h1.H1Pool`."""

    def __init__(self, settings: HTTPDeploymentSettings, headers: Mapping[str, str]) -> None:
        self._name = settings.name
        self._connect_s = settings.timeouts.connect_s
        sent = fixed_headers(settings, headers)
        self.redactor = Redactor.for_upstream(settings.base_url, sent)
        self._pool = h1.H1Pool(
            settings.base_url,
            sent,
            max_connections=settings.max_connections,
            keepalive_expiry=KEEPALIVE_S,
        )

    async def post(
        self, path: str, body: bytes, total_s: float | None, headers: Headers = None
    ) -> bytes:
        return await self._whole("POST", path, body, total_s, self._connect_s, headers)

    async def _whole(
        self,
        method: str,
        path: str,
        body: bytes,
        total_s: float | None,
        connect_s: float | None,
        headers: Headers = None,
    ) -> bytes:
        try:
            async with asyncio.timeout(total_s):
                response = await self._pool.request(
                    method, path, body, headers=with_context(headers), connect_timeout=connect_s
                )
                content = await response.read()
        except h1.H1Error as exc:
            raise error_for_transport(self._name, exc, self.redactor) from exc
        except TimeoutError:
            raise timeout_error(self._name, f"no answer within {total_s}s") from None
        if response.is_error:
            text = content.decode(errors="replace")
            raise error_for_status(
                self._name, response.status, text, response.headers, self.redactor
            )
        return content

    @asynccontextmanager
    async def stream(
        self, path: str, body: bytes, timeouts: Timeouts, headers: Headers = None
    ) -> AsyncIterator[FrameBatches]:
        first_byte_s = first_byte_limit(timeouts)
        deadline = deadline_in(timeouts.total_s)
        connect_s = smallest(self._connect_s, first_byte_s)
        try:
            response = await self._pool.request(
                "POST",
                path,
                body,
                headers=with_context({**EVENT_STREAM, **(headers or {})}),
                connect_timeout=connect_s,
                head_timeout=first_byte_s,
                read_timeout=first_byte_s,
            )
        except h1.ReadTimeout:
            raise stalled_error(self._name, f"no response within {first_byte_s}s") from None
        except h1.H1Error as exc:
            raise error_for_transport(self._name, exc, self.redactor) from exc
        try:
            if response.is_error:
                content = await response.read()
                text = content.decode(errors="replace")
                raise error_for_status(
                    self._name, response.status, text, response.headers, self.redactor
                )
            chunks = response.iter_chunks()
            try:
                first = await anext(chunks, b"")
            except h1.ReadTimeout:
                raise stalled_error(self._name, f"no first byte within {first_byte_s}s") from None
            yield FrameBatches(first, chunks, self._name, deadline, response.body_read)
        finally:
            await response.aclose()

    async def get_json(self, path: str, timeout_s: float) -> Any:
        return load_json(await self._whole("GET", path, b"", timeout_s, timeout_s), self._name)

    async def status_of(self, path: str, timeout_s: float) -> int | None:
        try:
            async with asyncio.timeout(timeout_s):
                response = await self._pool.request("GET", path, b"", connect_timeout=timeout_s)
                await response.read()
        except (h1.H1Error, TimeoutError):
            return None
        return response.status

    async def aclose(self) -> None:
        await self._pool.aclose()


def deadline_in(seconds: float | None) -> float | None:
    return None if seconds is None else asyncio.get_running_loop().time() + seconds
