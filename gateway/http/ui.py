"""The status page: ``/ui``, rendered on the server, refreshed by a small script.

``GET /ui`` renders the whole page; its script (``/ui/assets/ui.js``, shipped in the
package like the stylesheet: nothing is loaded from elsewhere) fetches ``/ui/panel``, the
same markup without the frame, every two seconds. ``GET /ui/status.json`` is the data as
JSON, for scripts.

Who may look:

* open mode (no API keys): anyone the open-mode guard lets in (this machine only, unless
  the operator opened the gateway to the network), as for every other route;
* with keys: the master key only. Scripts send it as ``Authorization: Bearer``; a browser
  signs in through the form, which sets a session cookie. The cookie holds an expiry, a
  nonce and their HMAC under a secret derived from the master key, never the key itself
  (:mod:`gateway.http.uisession`): a leaked cookie opens this page for at most
  :data:`SESSION_S` or until its sign-out, not the API, and changing the master key ends
  every session (on every replica: they derive the same secret). It is ``HttpOnly`` (no
  script reads it), ``SameSite=Strict`` (no other site's page sends it), limited to
  ``/ui`` and ``Secure`` over HTTPS. The sign-in and sign-out forms refuse an ``Origin``
  other than the page's own, and the pages forbid framing. A sign-in form is read only up
  to :data:`_MAX_FORM` bytes (413 past it), and failed sign-ins, by the form or by an
  ``Authorization`` header, are limited per client address (429 past the limit).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from litestar import Request, Response, get, post
from litestar.datastructures import Cookie
from litestar.params import FromPath

from gateway.admission.keys import KeyRing
from gateway.admission.limits import Grant, Limiter
from gateway.http.uicharts import charts, legend, svg
from gateway.http.uidata import StatusData
from gateway.http.uisession import (
    Session,
    client_address,
    read_session,
    session_value,
    sign_in_attempt,
    sign_out,
    signed_in,
    signed_out,
)

if TYPE_CHECKING:
    from jinja2 import Environment

COOKIE = "shunter_ui"
SESSION_S = 12 * 3600
REFRESH_MS = 2000
_PURPOSE = "shunter status page session v1"
_ASSETS = {"ui.js": "text/javascript; charset=utf-8", "ui.css": "text/css; charset=utf-8"}
_MAX_FORM = 4096
_HEADERS = {
    "cache-control": "no-store",
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",  # "no-referrer" makes form posts say Origin: null
}
_HTML = "text/html; charset=utf-8"
_NONE = "\u2013"  # an en dash where there is no figure
_NEEDS_MASTER = json.dumps(
    {
        "error": {
            "message": "This page needs the gateway's master key.",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }
).encode()


@dataclass
class StatusPage:
    """The page's templates, assets and data, one per app."""

    data: StatusData = field(default_factory=StatusData)
    assets: dict[str, bytes] = field(default_factory=dict)
    _templates: Environment | None = None

    @property
    def templates(self) -> Environment:
        """The page's templates, loaded when the page is first asked for (a gateway whose
        page nobody opens loads no template engine)."""
        if self._templates is None:
            from jinja2 import Environment, PackageLoader, select_autoescape

            templates = Environment(
                loader=PackageLoader("gateway.http", "ui"),
                autoescape=select_autoescape(["html"]),
                trim_blocks=True,
                lstrip_blocks=True,
            )
            templates.filters.update(
                num=_num, clock=_clock, pct=_pct, chart_svg=svg, chart_legend=legend
            )
            self._templates = templates
        return self._templates

    def render(self, template: str, **values: Any) -> bytes:
        return self.templates.get_template(template).render(**values).encode()

    def asset(self, name: str) -> bytes:
        if name not in self.assets:
            self.assets[name] = (resources.files("gateway.http") / "ui" / name).read_bytes()
        return self.assets[name]


@dataclass(frozen=True)
class _Access:
    allowed: bool
    open_mode: bool = False
    can_sign_in: bool = True
    wait_s: float | None = None
    """Set when the client's failed sign-ins are at their limit: the seconds to wait."""


def _page(request: Request[Any, Any, Any]) -> StatusPage:
    state = request.app.state
    page: StatusPage | None = getattr(state, "status_page", None)
    if page is None:
        page = state.status_page = StatusPage()
    return page


def _keys(request: Request[Any, Any, Any]) -> KeyRing:
    keys: KeyRing = request.app.state.services.admission.keys
    return keys


async def _access(request: Request[Any, Any, Any]) -> _Access:
    keys = _keys(request)
    if not await keys.auth_enabled():
        return _Access(True, open_mode=True)
    authorization = request.headers.get("authorization")
    if authorization is not None:  # a guess as much as a form's: limited the same way
        attempt = await _attempt(request)
        if isinstance(attempt, float):
            return _Access(False, wait_s=attempt)
        if keys.is_master(authorization):
            await signed_in(_limiter(request), attempt)
            return _Access(True)
    if _secret(request) is None:  # keys, but no master key: nobody may see the page
        return _Access(False, can_sign_in=False)
    session = _session(request)
    return _Access(session is not None and not await signed_out(keys.store, session))


def _limiter(request: Request[Any, Any, Any]) -> Limiter:
    limiter: Limiter = request.app.state.services.admission.limiter
    return limiter


async def _attempt(request: Request[Any, Any, Any]) -> Grant | float:
    """One sign-in attempt taken from the client's allowance, or the seconds to wait."""
    trusted = request.app.state.gateway.config.http.trusted_proxies
    peer = request.client.host if request.client is not None else None
    client = client_address(peer, request.headers.get("x-forwarded-for"), trusted)
    return await sign_in_attempt(_limiter(request), client)


def _throttled(wait_s: float) -> Response[bytes]:
    retry = str(max(1, round(wait_s)))
    return _html(b"Too many failed sign-ins; try again later.", 429, **{"retry-after": retry})


def _secret(request: Request[Any, Any, Any]) -> bytes | None:
    return _keys(request).derived_secret(_PURPOSE)


def _session(request: Request[Any, Any, Any]) -> Session | None:
    """The request's signed, unexpired session cookie (signed out or not)."""
    secret = _secret(request)
    if secret is None:
        return None
    return read_session(request.cookies.get(COOKIE), secret, time.time())


async def _values(request: Request[Any, Any, Any], access: _Access) -> dict[str, Any]:
    app = request.app.state
    snapshot = await _page(request).data.snapshot(
        app.gateway, app.telemetry, app.services, admin=True, tools=getattr(app, "mcp", None)
    )
    return {
        "s": snapshot,
        "charts": charts(snapshot["history"]),
        "open_mode": access.open_mode,
        "refresh_ms": REFRESH_MS,
    }


def _html(body: bytes, status: int = 200, **headers: str) -> Response[bytes]:
    return Response(body, status_code=status, media_type=_HTML, headers={**_HEADERS, **headers})


def _login(request: Request[Any, Any, Any], access: _Access, error: str = "") -> Response[bytes]:
    body = _page(request).render("login.html", error=error, can_sign_in=access.can_sign_in)
    return _html(body, 401)


@get("/ui", include_in_schema=False)
async def status_page(request: Request[Any, Any, Any]) -> Response[bytes]:
    """The whole page, or the sign-in form."""
    access = await _access(request)
    if access.wait_s is not None:
        return _throttled(access.wait_s)
    if not access.allowed:
        return _login(request, access)
    return _html(_page(request).render("page.html", **await _values(request, access)))


@get("/ui/panel", include_in_schema=False)
async def status_panel(request: Request[Any, Any, Any]) -> Response[bytes]:
    """The page's live part, for the refresh script (401 once the session is over)."""
    access = await _access(request)
    if access.wait_s is not None:
        return _throttled(access.wait_s)
    if not access.allowed:
        return _html(b"", 401)
    return _html(_page(request).render("panel.html", **await _values(request, access)))


@get("/ui/status.json", include_in_schema=False)
async def status_json(request: Request[Any, Any, Any]) -> Response[bytes]:
    """The page's data as JSON."""
    access = await _access(request)
    if access.wait_s is not None:
        return _throttled(access.wait_s)
    if not access.allowed:
        return Response(_NEEDS_MASTER, status_code=401, media_type="application/json")
    values = await _values(request, access)
    body = json.dumps(values["s"]).encode()
    return Response(body, media_type="application/json", headers={"cache-control": "no-store"})


@get("/ui/assets/{name:str}", include_in_schema=False)
async def status_asset(request: Request[Any, Any, Any], name: FromPath[str]) -> Response[bytes]:
    """The page's script and stylesheet, from the package."""
    media_type = _ASSETS.get(name)
    if media_type is None:
        return Response(b"", status_code=404)
    body = _page(request).asset(name)
    return Response(body, media_type=media_type, headers={"cache-control": "no-cache"})


@post("/ui/login", include_in_schema=False)
async def sign_in(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Check the master key from the form; on success set the session cookie."""
    announced = request.headers.get("content-length", "")
    if announced.isdigit() and int(announced) > _MAX_FORM:
        return _html(b"The sign-in form is too large.", 413)
    if not _same_origin(request):
        return _html(b"Cross-origin sign-in refused.", 403)
    access = await _access(request)
    if access.open_mode:
        return _redirect()
    attempt = await _attempt(request) if access.wait_s is None else access.wait_s
    if isinstance(attempt, float):
        return _throttled(attempt)
    raw = await _bounded_body(request)
    if raw is None:
        return _html(b"The sign-in form is too large.", 413)
    keys, secret = _keys(request), _secret(request)
    submitted = parse_qs(raw.decode("utf-8", "replace")).get("key", [""])[0]
    if secret is None or not keys.is_master(f"Bearer {submitted.strip()}"):
        return _login(request, access, "That is not the master key.")
    await signed_in(_limiter(request), attempt)
    expires = int(time.time()) + SESSION_S
    return _redirect(_cookie(request, session_value(secret, expires), SESSION_S))


async def _bounded_body(request: Request[Any, Any, Any]) -> bytes | None:
    """The body, or ``None`` as soon as it passes :data:`_MAX_FORM` bytes (the rest is
    never read)."""
    parts: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > _MAX_FORM:
            return None
        parts.append(chunk)
    return b"".join(parts)


@post("/ui/logout", include_in_schema=False)
async def sign_out_page(request: Request[Any, Any, Any]) -> Response[bytes]:
    """End the browser's session, here and on the server."""
    if not _same_origin(request):
        return _html(b"Cross-origin sign-out refused.", 403)
    session = _session(request)
    if session is not None:
        await sign_out(_keys(request).store, session, time.time())
    return _redirect(_cookie(request, "", 0))


def _cookie(request: Request[Any, Any, Any], value: str, max_age: int) -> Cookie:
    return Cookie(
        key=COOKIE,
        value=value,
        max_age=max_age,
        path="/ui",
        httponly=True,
        samesite="strict",
        secure=request.scope.get("scheme") == "https",
    )


def _redirect(cookie: Cookie | None = None) -> Response[bytes]:
    headers = {"location": "/ui", "cache-control": "no-store"}
    cookies = [cookie] if cookie is not None else None
    return Response(b"", status_code=303, headers=headers, cookies=cookies)


def _same_origin(request: Request[Any, Any, Any]) -> bool:
    """A form post from this gateway's own page (a browser always names the origin of a
    POST; a client that sends none is not a page)."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    host = request.headers.get("host", "")
    return origin in (f"http://{host}", f"https://{host}")


def _num(value: object, digits: int = 1) -> str:
    if value is None:
        return _NONE
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _pct(value: object) -> str:
    return _NONE if not isinstance(value, int | float) else f"{value * 100:.0f}%"


def _clock(value: object) -> str:
    if not isinstance(value, int | float):
        return _NONE
    return datetime.fromtimestamp(value, UTC).strftime("%H:%M:%S")


UI_ROUTES = [status_page, status_panel, status_json, status_asset, sign_in, sign_out_page]
