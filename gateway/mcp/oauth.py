"""OAuth 2 client credentials for a remote MCP server: a token fetched from the configured
token endpoint, sent as ``Authorization: Bearer`` and kept until shortly before it expires
(fetched again at once when the server answers 401 to it)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable

import httpx2

from gateway.config.mcp import OAuthClientCredentials

EARLY_S = 30.0
"""A token is renewed this long before it expires, so none expires in flight."""
DEFAULT_LIFETIME_S = 300.0
"""How long a token is kept when the endpoint does not say (``expires_in``)."""


class TokenError(Exception):
    """The token endpoint refused or could not be reached (words safe to show)."""


class ClientCredentials(httpx2.Auth):
    """An ``httpx2`` auth that adds a client-credentials bearer token."""

    def __init__(
        self,
        settings: OAuthClientCredentials,
        timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings = settings
        self._timeout_s = timeout_s
        self._clock = clock
        self._token: str | None = None
        self._expires = 0.0
        self._lock = asyncio.Lock()

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        token = await self.token()
        request.headers["Authorization"] = f"Bearer {token}"
        response = yield request
        if response.status_code == 401:  # revoked or rotated early: one fresh token, once
            token = await self.token(stale=token)
            request.headers["Authorization"] = f"Bearer {token}"
            yield request

    async def token(self, stale: str | None = None) -> str:
        """A valid token: the kept one, or a new one (also when ``stale`` is the kept one)."""
        async with self._lock:
            if self._token is not None and self._token != stale and self._clock() < self._expires:
                return self._token
            token, lifetime = await self._fetch()
            self._token = token
            self._expires = self._clock() + max(0.0, lifetime - EARLY_S)
            return token

    async def _fetch(self) -> tuple[str, float]:
        settings = self._settings
        form = {
            "grant_type": "client_credentials",
            "client_id": settings.client_id,
            "client_secret": settings.client_secret.get_secret_value(),
        }
        if settings.scope:
            form["scope"] = settings.scope
        try:
            async with httpx2.AsyncClient(timeout=self._timeout_s) as client:
                response = await client.post(settings.token_url, data=form)
        except httpx2.HTTPError as exc:
            raise TokenError(f"token endpoint unreachable: {type(exc).__name__}") from exc
        if response.status_code != 200:
            raise TokenError(f"token endpoint answered {response.status_code}")
        try:
            body = response.json()
            token = str(body["access_token"])
            lifetime = float(body.get("expires_in") or DEFAULT_LIFETIME_S)
        except (ValueError, KeyError, TypeError) as exc:
            raise TokenError("token endpoint answered without an access_token") from exc
        return token, lifetime
