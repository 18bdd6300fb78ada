"""What the request path reads of a request before it does anything with it: the caller's
key (from the headers alone, before the body is read) and the body, size-limited and
validated."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

from litestar.exceptions import ClientException, MethodNotAllowedException
from litestar.exceptions.http_exceptions import RequestEntityTooLarge
from litestar.types import Receive, Scope
from pydantic import BaseModel, ValidationError

from gateway.admission.admit import Admission
from gateway.admission.cache import ResponseCache
from gateway.admission.keys import KeyInfo
from gateway.admission.sessions import SESSION_HEADERS
from gateway.dispatch import Gateway
from gateway.errors import ServiceUnavailableError
from gateway.hosted.context import HostedContext
from gateway.http.asgi import JSONBody
from gateway.http.bodies import BodyBuffers, BodyLease
from gateway.ingress.conversations import ConversationStore
from gateway.ingress.response_tools import HostedTools
from gateway.ingress.store import ResponseStore
from gateway.protocol import jsonio
from gateway.protocol.validation import request_error
from gateway.telemetry.tracing import note_request

M = TypeVar("M", bound=BaseModel)
MAX_BODY_BYTES = 10_000_000  # as the framework's default for its own handlers


@dataclass
class Services:
    """What the request path uses besides the gateway; one per app.

    ``send_timeout_s``: how long one write may wait for a client that stopped reading;
    ``protect_ops``: whether ``/metrics`` and readiness figures need the master key;
    ``responses``: the stored responses of ``/v1/responses``; ``conversations``: those of
    ``/v1/conversations``; ``hosted_tools``: what
    ``/v1/responses`` does with tools only OpenAI runs (``drop``: reported, ``refuse``), and
    per model (``hosted_by_model``); ``hosted``: the tools the gateway runs itself (MCP
    servers, stand-ins) and its bounds."""

    admission: Admission
    cache: ResponseCache
    responses: ResponseStore
    conversations: ConversationStore
    send_timeout_s: float = 30.0
    protect_ops: bool = False
    hosted_tools: HostedTools = "drop"
    hosted_by_model: dict[str, HostedTools] = field(default_factory=dict)
    hosted: HostedContext = field(default_factory=HostedContext)
    bodies: BodyBuffers = field(default_factory=lambda: BodyBuffers(256_000_000, 64_000_000))

    def hosted_for(self, model: str) -> HostedTools:
        """What ``/v1/responses`` does with hosted tools for ``model``."""
        return self.hosted_by_model.get(model, self.hosted_tools)


@dataclass
class Arrival:
    """A request whose caller is known and whose body has been read (not yet parsed)."""

    services: Services
    gateway: Gateway
    key: KeyInfo
    body: bytes
    facts: dict[str, Any]
    """The log/metrics facts of this request (written out by the middleware)."""
    request_id: str
    session_header: str | None = None
    """The client's session id from its headers (``x-shunter-session``, or what agent CLIs
    send: :data:`~gateway.admission.sessions.SESSION_HEADERS`), if it sent one."""


async def arrive(scope: Scope, receive: Receive, x_api_key: bool = False) -> Arrival:
    """The caller's key, then the body: a request with a bad key is refused before its
    body is read."""
    services, gateway, key = await authenticated(scope, x_api_key)
    lease = services.bodies.lease(key.id)
    try:
        body = await read_body(scope, receive, lease=lease)
    finally:
        lease.release()
    facts = request_facts(scope)
    request_id = scope["state"].get("request_id", "")
    return Arrival(services, gateway, key, body, facts, request_id, session_header(scope))


def session_header(scope: Scope) -> str | None:
    """The first session header the client sent (see :data:`SESSION_HEADERS`)."""
    for name in SESSION_HEADERS:
        value = _header(scope, name.encode("latin-1"))
        if value:
            return value
    return None


def parse_body(model: type[M], body: bytes) -> M:
    """Validate a request body; errors become 400s naming the offending ``param``."""
    try:
        parsed = jsonio.validate_json(model, body)
    except ValidationError as exc:
        raise request_error(exc) from exc
    note_request(parsed)  # the span's sampling parameters, from this one parse
    return parsed


def request_facts(scope: Scope) -> dict[str, Any]:
    """The log/metrics facts of this request (written out by the middleware)."""
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


def json_response(model: BaseModel, headers: dict[str, str]) -> JSONBody:
    return JSONBody(jsonio.to_json(model), headers)


async def authenticated(scope: Scope, x_api_key: bool = False) -> tuple[Services, Gateway, KeyInfo]:
    """The app's services, its gateway (if it takes work) and the caller's key, from the
    headers alone: a request with a bad key is refused before its body is read."""
    if scope.get("method") != "POST":
        raise MethodNotAllowedException(headers={"allow": "POST"})
    state = scope["app"].state
    gateway = taking_work(state.gateway)
    services: Services = state.services
    key = await services.admission.authenticate(credentials(scope, x_api_key))
    request_facts(scope)["key_id"] = key.id
    return services, gateway, key


def credentials(scope: Scope, x_api_key: bool = False) -> str | None:
    """The ``Authorization`` header; where Anthropic's clients call, ``x-api-key`` too
    (as a bearer token) when there is no ``Authorization``."""
    authorization = _header(scope, b"authorization")
    if authorization is None and x_api_key:
        key = _header(scope, b"x-api-key")
        if key:
            return f"Bearer {key}"
    return authorization


async def read_body(
    scope: Scope, receive: Receive, limit: int = MAX_BODY_BYTES, lease: BodyLease | None = None
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
