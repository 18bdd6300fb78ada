"""An :class:`~backends.http.upstream.Upstream` over httpx: for upstreams reached through a
proxy (see :func:`~backends.http.upstream.proxied`) and for tests that hand a backend an
``httpx`` transport. Imported only then: every other upstream uses the pooled client of
:mod:`backends.http.h1`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import httpx

from backends.base import Timeouts
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
from backends.http.upstream import (
    EVENT_STREAM,
    KEEPALIVE_S,
    Headers,
    deadline_in,
    first_byte_limit,
    fixed_headers,
    with_context,
)


class HttpxUpstream:
    """:class:`~backends.http.upstream.Upstream` over one pooled ``httpx.AsyncClient``."""

    def __init__(
        self,
        settings: HTTPDeploymentSettings,
        headers: Mapping[str, str],
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._name = settings.name
        limits = httpx.Limits(
            max_connections=settings.max_connections,
            max_keepalive_connections=settings.max_connections,
            keepalive_expiry=KEEPALIVE_S,
        )
        timeouts = settings.timeouts
        sent = fixed_headers(settings, headers)
        self.redactor = Redactor.for_upstream(settings.base_url, sent)
        self._client = httpx.AsyncClient(
            base_url=settings.base_url,
            headers=sent,
            timeout=httpx.Timeout(
                timeouts.total_s, connect=timeouts.connect_s, pool=timeouts.connect_s
            ),
            limits=limits,
            transport=transport,
            follow_redirects=False,
        )
        self._connect_s = timeouts.connect_s

    async def post(
        self, path: str, body: bytes, total_s: float | None, headers: Headers = None
    ) -> bytes:
        return await self._whole("POST", path, body, total_s, headers)

    async def _whole(
        self, method: str, path: str, body: bytes, total_s: float | None, headers: Headers = None
    ) -> bytes:
        try:
            async with asyncio.timeout(total_s):
                response = await self._client.request(
                    method, path, content=body, headers=with_context(headers)
                )
        except httpx.HTTPError as exc:
            raise error_for_transport(self._name, exc, self.redactor) from exc
        except TimeoutError:
            raise timeout_error(self._name, f"no answer within {total_s}s") from None
        if response.is_error:
            raise error_for_status(
                self._name, response.status_code, response.text, response.headers, self.redactor
            )
        return response.content

    @asynccontextmanager
    async def stream(
        self, path: str, body: bytes, timeouts: Timeouts, headers: Headers = None
    ) -> AsyncIterator[FrameBatches]:
        first_byte_s = first_byte_limit(timeouts)
        timeout = httpx.Timeout(first_byte_s, connect=self._connect_s, pool=self._connect_s)
        request = self._client.build_request(
            "POST",
            path,
            content=body,
            headers=with_context({**EVENT_STREAM, **(headers or {})}),
            timeout=timeout,
        )
        deadline = deadline_in(timeouts.total_s)
        first_deadline = deadline_in(first_byte_s)
        try:
            async with asyncio.timeout_at(first_deadline):
                response = await self._client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise error_for_transport(self._name, exc, self.redactor) from exc
        except TimeoutError:
            raise stalled_error(self._name, f"no response within {first_byte_s}s") from None
        try:
            try:
                async with asyncio.timeout_at(first_deadline):
                    if response.is_error:
                        await response.aread()
                        raise error_for_status(
                            self._name,
                            response.status_code,
                            response.text,
                            response.headers,
                            self.redactor,
                        )
                    chunks = response.aiter_bytes()
                    first = await anext(chunks, b"")
            except TimeoutError:
                raise stalled_error(self._name, f"no first byte within {first_byte_s}s") from None
            yield FrameBatches(first, chunks, self._name, deadline)
        finally:
            await response.aclose()

    async def get_json(self, path: str, timeout_s: float) -> Any:
        return load_json(await self._whole("GET", path, b"", timeout_s), self._name)

    async def status_of(self, path: str, timeout_s: float) -> int | None:
        try:
            async with asyncio.timeout(timeout_s):
                response = await self._client.get(path)
        except (httpx.HTTPError, TimeoutError):
            return None
        return response.status_code

    async def aclose(self) -> None:
        await self._client.aclose()
