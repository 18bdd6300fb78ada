"""A shunter worker's KV endpoints, called by the deployment in front of it: its export
(``GET worker/kv/{link}``) read as a header and a stream of bytes, and an import
(``PUT worker/kv``) sent as a stream, both with the deployment's key and headers.

It has its own httpx client: a move streams its body both ways and is rare and large,
unlike the whole JSON requests the pooled client of :mod:`backends.http.upstream` sends.
Refusals come back as the worker said them (409 ``kv_mismatch`` / ``kv_busy``, 413, 503
with retry-after) through :func:`~backends.http.errors.error_for_status`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from urllib.parse import quote

import httpx

from backends.http.errors import error_for_status, map_transport_errors, protocol_error
from backends.http.redact import Redactor
from backends.http.settings import HTTPDeploymentSettings
from backends.http.upstream import USER_AGENT
from backends.kv import KV_MEDIA_TYPE, KvHeader, KvImported, encode_header, split_header

READ_TIMEOUT_S = 60.0
"""The longest wait for the next bytes of a move (the worker runs it between two steps)."""


class KvWire:
    """One worker's KV endpoints."""

    def __init__(
        self,
        settings: HTTPDeploymentSettings,
        login: Mapping[str, str],
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._name = settings.name
        headers = {"user-agent": USER_AGENT, **login, **settings.headers}
        self._redactor = Redactor.for_upstream(settings.base_url, headers)
        timeout = httpx.Timeout(READ_TIMEOUT_S, connect=settings.timeouts.connect_s)
        self._client = httpx.AsyncClient(
            base_url=settings.base_url.rstrip("/") + "/",
            headers=headers,
            timeout=timeout,
            transport=transport,
            follow_redirects=False,
        )

    async def export(self, link: str) -> tuple[KvHeader, AsyncIterator[bytes]]:
        """The worker's header, and its state as it arrives (iterate it to the end, or
        close it, to let the connection go)."""
        request = self._client.build_request("GET", f"worker/kv/{quote(link, safe='')}")
        with map_transport_errors(self._name, self._redactor):
            response = await self._client.send(request, stream=True)
        try:
            await self._check(response)
            with map_transport_errors(self._name, self._redactor):
                header, rest = await split_header(response.aiter_bytes())
        except BaseException:
            await response.aclose()
            raise
        return header, self._state(response, rest)

    async def _state(
        self, response: httpx.Response, rest: AsyncIterator[bytes]
    ) -> AsyncIterator[bytes]:
        try:
            with map_transport_errors(self._name, self._redactor):
                async for chunk in rest:
                    yield chunk
        finally:
            await response.aclose()

    async def load(self, header: KvHeader, chunks: AsyncIterator[bytes]) -> KvImported:
        """Send ``header`` and ``chunks`` as the worker's import; what it took."""
        head = encode_header(header)

        async def body() -> AsyncIterator[bytes]:
            yield head
            async for chunk in chunks:
                yield chunk

        length = str(len(head) + header.n_bytes)
        headers = {"content-type": KV_MEDIA_TYPE, "content-length": length}
        with map_transport_errors(self._name, self._redactor):
            response = await self._client.put("worker/kv", content=body(), headers=headers)
        await self._check(response)
        try:
            return KvImported.model_validate_json(response.content)
        except ValueError:
            raise protocol_error(self._name, "answered a KV import without its figures") from None

    async def _check(self, response: httpx.Response) -> None:
        if response.is_error:
            await response.aread()
            raise error_for_status(
                self._name, response.status_code, response.text, response.headers, self._redactor
            )

    async def aclose(self) -> None:
        await self._client.aclose()
