"""What every backend over a remote HTTP API shares: its settings, the pooled connection to
its upstream opened at start and closed at the end, the requests in flight, health probes,
and upstream failures mapped onto :mod:`gateway.errors`.

A wire API (:mod:`backends.openai`, :mod:`backends.anthropic`) derives from
:class:`HTTPBackend`, says how it logs in (:meth:`HTTPBackend.login_headers`) and where a
probe asks (:attr:`HTTPBackend.health_path`), and adds its own requests and answers.
"""

from __future__ import annotations

import asyncio
import contextlib
from abc import abstractmethod
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from backends.base import Backend, LiveStats
from backends.http.errors import map_transport_errors
from backends.http.jsonbody import encode_json
from backends.http.redact import Redactor
from backends.http.settings import HTTPDeploymentSettings, read_api_key
from backends.http.sse import FrameBatches
from backends.http.upstream import H1Upstream, Upstream, probe, proxied
from gateway.errors import GatewayError
from gateway.protocol import ChatCompletionRequest, ChatMessage

if TYPE_CHECKING:
    import httpx

S = TypeVar("S", bound=HTTPDeploymentSettings)
PROBE_TEXT = "Reply with OK."


def probe_request() -> ChatCompletionRequest:
    """What a health probe asks a chat deployment: one token, the least work that proves
    its chat endpoint answers."""
    message = ChatMessage(role="user", content=PROBE_TEXT)
    return ChatCompletionRequest(model="health-probe", messages=[message], max_tokens=1)


class HTTPBackend(Backend, Generic[S]):
    """A :class:`~backends.base.Backend` over one pooled connection to a remote API."""

    health_path: ClassVar[str]
    """What a probe GETs when the settings name no ``health_path`` (the API's model list)."""

    def __init__(self, settings: S, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        """``transport``: an httpx transport to send through instead (a test's upstream)."""
        self._settings = settings
        self._transport = transport
        self._upstream: Upstream | None = None
        self._in_flight = 0

    @property
    def name(self) -> str:
        return self._settings.name

    @property
    def settings(self) -> S:
        return self._settings

    @abstractmethod
    def login_headers(self, key: str | None) -> dict[str, str]:
        """The headers every request carries: the API key ``key`` (``None``: no key) as
        this API expects it, and whatever else it requires."""

    async def start(self) -> None:
        """Read the API key and open the connection pool."""
        if self._upstream is not None:
            return
        headers = self.login_headers(read_api_key(self._settings.api_key_env))
        self._upstream = _connect(self._settings, headers, self._transport)

    async def aclose(self) -> None:
        """Close the pool; streams still open are cut."""
        upstream, self._upstream = self._upstream, None
        if upstream is not None:
            await upstream.aclose()

    def stats(self) -> LiveStats:
        return LiveStats(in_flight=self._in_flight)

    def probe_path(self) -> str:
        """What a health probe GETs: the settings' ``health_path``, else :attr:`health_path`."""
        return self._settings.health_path or self.health_path

    async def health(self, timeout_s: float) -> bool | None:
        """A background probe while the breaker is open: ``GET`` :meth:`probe_path`, then,
        unless that says down, the smallest chat request (one token), since an upstream
        can list its models while its chat endpoint fails.
        ``None`` when probes are off or the upstream cannot tell."""
        if self._upstream is None or not self._settings.health_check:
            return None
        listed = await probe(self._upstream, self.probe_path(), timeout_s)
        if listed is False or not self.capabilities.chat:
            return listed
        return await self._answers(timeout_s)

    async def _answers(self, timeout_s: float) -> bool:
        """Does a one-token chat request get an answer? A refusal the request caused (a
        4xx) is an answer too: the deployment is up."""
        try:
            async with asyncio.timeout(timeout_s):
                await self.chat(probe_request())
        except GatewayError as exc:
            return not exc.counts_as_failure
        except TimeoutError:
            return False
        return True

    async def _post(
        self, path: str, body: dict[str, Any] | bytes, headers: Mapping[str, str] | None = None
    ) -> bytes:
        """POST ``body`` (JSON: a dict encoded, or bytes as they are), counted in flight;
        the answer's bytes."""
        upstream = self._require_upstream()
        payload = body if isinstance(body, bytes) else encode_json(body)
        self._in_flight += 1
        try:
            return await upstream.post(path, payload, self._settings.timeouts.total_s, headers)
        finally:
            self._in_flight -= 1

    @contextlib.asynccontextmanager
    async def post_stream(
        self, path: str, body: dict[str, Any] | bytes, headers: Mapping[str, str] | None = None
    ) -> AsyncIterator[FrameBatches]:
        """POST ``body`` (as :meth:`_post` does) as a streaming request and hand over its
        SSE frames, counted in flight, transport failures mapped (as everywhere) until
        the block ends."""
        upstream = self._require_upstream()
        payload = body if isinstance(body, bytes) else encode_json(body)
        self._in_flight += 1
        try:
            with self._map_errors():
                async with upstream.stream(
                    path, payload, self._settings.timeouts, headers
                ) as frames:
                    yield frames
        finally:
            self._in_flight -= 1

    def _map_errors(self) -> AbstractContextManager[None]:
        """Transport failures (connect, timeout, reset) onto gateway.errors."""
        return map_transport_errors(self.name, self._redactor())

    def _redactor(self) -> Redactor:
        return self._upstream.redactor if self._upstream is not None else Redactor()

    def _require_upstream(self) -> Upstream:
        if self._upstream is None:
            raise RuntimeError(f"backend {self.name} is not started")
        return self._upstream


def _connect(
    settings: HTTPDeploymentSettings,
    headers: Mapping[str, str],
    transport: httpx.AsyncBaseTransport | None = None,
) -> Upstream:
    """The pooled connection for one deployment. httpx when ``transport`` is given, or when
    the environment sends this upstream through a proxy (``HTTP_PROXY``, ``HTTPS_PROXY``,
    ``ALL_PROXY``; hosts in ``NO_PROXY`` go direct), which the fast client does not speak."""
    if transport is not None or proxied(settings.base_url):
        # httpx (1.5 MB a process) is loaded only for these
        from backends.http.httpxupstream import HttpxUpstream

        return HttpxUpstream(settings, headers, transport)
    return H1Upstream(settings, headers)
