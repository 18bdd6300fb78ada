"""What a request must look like before the app reads it: a guard against web pages.

Every request of an operation that reads a JSON body (the registry says which:
:mod:`gateway.apis.registry`) must carry ``Content-Type: application/json`` (415 otherwise):
a browser may send ``text/plain`` (or no type at all) across origins without asking first,
and such a body must never be parsed as JSON.

In open mode (no API key configured: :meth:`KeyRing.auth_enabled` is false) anyone who can
reach the gateway may use it, so it also refuses (403) what only a web page would send:

* a ``Host`` other than ``localhost``, ``127.0.0.1`` or ``[::1]`` (any port) on a connection
  to a loopback address: the name a DNS-rebinding page uses to read the gateway's answers.
  Connections to other addresses exist only when the operator opened the gateway to the
  network (``--allow-open``), where the names it answers to cannot be known;
* an ``Origin`` that is not a loopback origin, nor one listed by name under
  ``cors.allow_origins``: a page on another site calling the gateway (see
  :mod:`gateway.http.cors`).

The same two checks apply to a WebSocket upgrade (``GET /v1/responses``), which browsers
send across origins without asking first: a refused one is closed before it is accepted
(403 to the handshake).

With API keys, neither check applies (a reverse proxy may use any ``Host``, and a page
cannot use a key it does not have).
"""

from __future__ import annotations

import structlog
from litestar.enums import ScopeType
from litestar.exceptions import HTTPException
from litestar.types import ASGIApp, Receive, Scope, Send

from gateway.admission.keys import KeyRing
from gateway.common.origins import loopback_host, loopback_origin
from gateway.errors import PermissionDeniedError

log = structlog.get_logger("shunter.guard")
JSON = b"application/json"
_CONFIGURE_KEYS = (
    "This gateway has no API keys (open mode), so it serves only local clients. To serve "
    "others, configure keys: set SHUNTER_MASTER_KEY, or create keys with `shunter keys "
    "create`."
)


class RequestGuard:
    """Pure ASGI middleware: refuses requests a web page could forge, before any parsing."""

    def __init__(self, app: ASGIApp, trusted_origins: frozenset[bytes] = frozenset()) -> None:
        self.app = app
        self._keys: KeyRing | None = None
        self._trusted = trusted_origins  # listed one by one under cors.allow_origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == ScopeType.HTTP:
            content_type = None
            for name, value in scope["headers"]:
                if name == b"content-type":
                    content_type = value
            handler = scope.get("route_handler")
            if handler is not None and scope["method"] in handler.opt.get("json", ()):
                _check_json(content_type)
            await self._check_page(scope)
        elif scope["type"] == ScopeType.WEBSOCKET:
            try:
                await self._check_page(scope)
            except PermissionDeniedError:
                await send({"type": "websocket.close", "code": 1008, "reason": None})
                return
        await self.app(scope, receive, send)

    async def _check_page(self, scope: Scope) -> None:
        """In open mode, refuse a foreign ``Host`` or ``Origin`` (403)."""
        host = origin = None
        for name, value in scope["headers"]:
            if name == b"host":
                host = value
            elif name == b"origin":
                origin = value
        foreign_host = host is not None and _on_loopback(scope) and not loopback_host(host)
        foreign_origin = (
            origin is not None and not loopback_origin(origin) and origin not in self._trusted
        )
        if (foreign_host or foreign_origin) and not await self._auth_enabled(scope):
            _refuse(foreign_host, host if foreign_host else origin)

    async def _auth_enabled(self, scope: Scope) -> bool:
        if self._keys is None:
            self._keys = scope["app"].state.services.admission.keys
        return await self._keys.auth_enabled()


def _on_loopback(scope: Scope) -> bool:
    server = scope.get("server")
    if server is None:  # a Unix socket: only this machine reaches it
        return True
    address: str = server[0]
    return address.startswith(("127.", "::ffff:127.")) or address == "::1"


def _check_json(content_type: bytes | None) -> None:
    if content_type == JSON:
        return
    if content_type is not None and content_type.split(b";", 1)[0].strip().lower() == JSON:
        return
    given = "none" if content_type is None else repr(content_type.decode("latin-1"))
    raise HTTPException(
        status_code=415,
        detail="Send the request body as JSON with the header 'Content-Type: "
        f"application/json' (this request's Content-Type: {given}).",
    )


def _refuse(host: bool, value: bytes | None) -> None:
    shown = (value or b"").decode("latin-1")[:200]
    log.info("request_refused", reason="host" if host else "origin", value=shown)
    if host:
        raise PermissionDeniedError(
            f"Requests for the host '{shown}' are refused: only localhost, 127.0.0.1 and "
            f"[::1] are served. {_CONFIGURE_KEYS}",
            code="host_not_allowed",
        )
    raise PermissionDeniedError(
        f"Requests from web pages of the origin '{shown}' are refused: a page you visit "
        f"must not use this gateway. {_CONFIGURE_KEYS}",
        code="origin_not_allowed",
    )
