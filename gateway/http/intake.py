"""What the spine reads of a request before an operation sees it: the caller's key (from
the headers alone, before the body is read, wherever the API's clients put it), the
request limit of a call that is not a generation, and the body, bounded.

One :class:`~gateway.apis.contract.Exchange` comes out, whatever the API; a WebSocket
message is read into one the same way (:mod:`gateway.http.socket`).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

from litestar.exceptions import ClientException
from litestar.exceptions.http_exceptions import RequestEntityTooLarge
from litestar.types import Receive, Scope

from gateway.apis.contract import Api, Exchange, KeySources, Operation
from gateway.dispatch import Gateway
from gateway.errors import ServiceUnavailableError
from gateway.http.bodies import BodyLease
from gateway.http.spine import Spine

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


async def arrive(scope: Scope, receive: Receive, api: Api, operation: Operation) -> Exchange:
    """The exchange of one HTTP request: its caller (refused before the body is read),
    one request off the caller's limit for an operation that is not a generation (which
    takes it at admission, with its tokens), then its body within the operation's bound
    and the key's share of the bodies being received."""
    spine: Spine = scope["app"].state.spine
    services = spine.services
    taking_work(services.gateway)
    headers = header_map(scope)
    query = query_map(scope)
    key = await services.admission.authenticate(credentials(headers, query, api.keys))
    facts = request_facts(scope)
    facts["key_id"] = key.id
    if operation.codec is None and operation.counted:
        await services.admission.count_request(key)
    method = str(scope.get("method", "GET"))
    body = b""
    if method in _BODY_METHODS:
        lease = spine.bodies.lease(key.id)
        try:
            body = await read_body(scope, receive, operation.max_body, lease)
        finally:
            lease.release()
    return Exchange(
        services,
        key,
        body,
        headers,
        scope["state"].get("request_id", ""),
        facts,
        scope.get("path_params") or {},
        query,
        "http",
        method,
    )


def header_map(scope: Scope) -> dict[str, str]:
    """The request's headers by lower-case name (the first of repeated ones)."""
    headers: dict[str, str] = {}
    for name, value in scope["headers"]:
        headers.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
    return headers


def query_map(scope: Scope) -> dict[str, str]:
    """The query string's parameters (the first of repeated ones); empty without one."""
    raw: bytes = scope.get("query_string", b"")
    if not raw:
        return {}
    query: dict[str, str] = {}
    for name, value in parse_qsl(raw.decode("latin-1"), keep_blank_values=True):
        query.setdefault(name, value)
    return query


def credentials(headers: dict[str, str], query: dict[str, str], sources: KeySources) -> str | None:
    """The caller's key as an ``Authorization`` value: the first of ``sources`` that is
    set (``authorization`` as it came; any other header or query parameter as a bearer
    token)."""
    for name in sources.headers:
        value = headers.get(name)
        if value:
            return value if name == "authorization" else f"Bearer {value}"
    for name in sources.query:
        value = query.get(name)
        if value:
            return f"Bearer {value}"
    return None


def request_facts(scope: Scope) -> dict[str, Any]:
    """The log/metrics facts of this request (written out by the access line)."""
    facts: dict[str, Any] = scope.setdefault("state", {}).setdefault("log", {})
    return facts


def taking_work(gateway: Gateway) -> Gateway:
    """The gateway, if it takes new work: while draining, new requests go elsewhere."""
    if gateway.draining:
        raise ServiceUnavailableError(
            "This gateway is shutting down; retry on another replica.",
            code="shutting_down",
            retry_after=1.0,
        )
    return gateway


async def read_body(
    scope: Scope, receive: Receive, limit: int, lease: BodyLease | None = None
) -> bytes:
    """The request body; 413 past ``limit`` bytes (announced or received). ``lease``
    counts its bytes against the bodies being received (:mod:`gateway.http.bodies`)."""
    announced = _header(scope, b"content-length")
    if announced is not None and announced.isdigit() and int(announced) > limit:
        raise RequestEntityTooLarge
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            # logged as every request whose client left: 499, not the 400 nobody reads
            scope.get("state", {}).get("log", {})["client_gone"] = "disconnected"
            raise ClientException("The client went away before sending the whole body.")
        chunk: bytes = message.get("body", b"")  # type: ignore[assignment]
        if chunk:
            size += len(chunk)
            if size > limit:
                raise RequestEntityTooLarge
            if lease is not None:
                lease.take(len(chunk))
            parts.append(chunk)
        if not message.get("more_body", False):
            return parts[0] if len(parts) == 1 else b"".join(parts)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None
