"""The contract between the request spine (:mod:`gateway.http`) and each client API.

An API is one package under :mod:`gateway.apis` that declares an :class:`Api`: its
operations (path, methods, transports, body bound), where its clients put their key, and
its error shape. The spine serves every operation the same way, whatever the transport
(an HTTP request, a WebSocket message, an MCP call): the caller's key, the request limits,
the body's bounds, then the operation, then one access line.

A generation operation is a :class:`Codec`, consulted twice:

* :meth:`Codec.decode`: the request (an :class:`Exchange`) → a :class:`Decoded` call: the
  request routing describes, the plan of what each deployment is sent, the session hint,
  what the cache keeps, as data;
* :meth:`Codec.encode`: the call and its :class:`Outcome` (a whole answer, a cache hit, or
  the stream dispatch opened) → the :class:`Reply` to write.

Between the two the spine admits the call, asks the cache, and hands dispatch the whole
request (:class:`~gateway.dispatch.Work`); nothing there calls back into the API. Other
operations (stored objects, listings, MCP) are a :data:`Handler`: an exchange in, a
reply out.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from gateway.admission.admit import Admission
from gateway.admission.cache import ResponseCache
from gateway.admission.keys import KeyInfo
from gateway.admission.sessions import SessionHint, SessionId
from gateway.dispatch import Form, Gateway, HostedLoop, Plan, Sending, ServedStream
from gateway.dispatch.work import Routable
from gateway.errors import GatewayError, InvalidRequestError
from gateway.hosted.context import HostedContext
from gateway.protocol import jsonio
from gateway.protocol.fieldnames import FieldNames
from gateway.protocol.validation import request_error
from gateway.telemetry.tracing import note_request

M = TypeVar("M", bound=BaseModel)
MAX_ECHOED = 200  # characters of a client's value an error message repeats
Transport = Literal["http", "websocket"]
MAX_BODY_BYTES = 10_000_000  # as the framework's default for its own handlers


@dataclass
class Services:
    """What the operations use besides the gateway; one per app.

    ``admission``, ``cache`` and ``hosted`` (the tools the gateway runs itself, and its
    bounds) serve every API; each API's own state (stored responses, MCP sessions) is in
    :attr:`apis`, by API name, made by its :attr:`Api.services`."""

    gateway: Gateway
    admission: Admission
    cache: ResponseCache
    hosted: HostedContext = field(default_factory=HostedContext)
    apis: dict[str, Any] = field(default_factory=dict)

    def of(self, api: str) -> Any:
        """The state of the API named ``api``."""
        return self.apis[api]


@dataclass
class Exchange:
    """One request (or one WebSocket message) whose caller is known and whose body has
    been read whole within its bounds: what an operation reads of it."""

    services: Services
    key: KeyInfo
    body: bytes
    headers: Mapping[str, str]
    """The request's headers, by lower-case name (for a WebSocket message: the upgrade's)."""
    request_id: str
    facts: dict[str, Any]
    """The access line's facts; an operation adds its own (``model``...)."""
    path_params: Mapping[str, str] = field(default_factory=dict)
    query: Mapping[str, str] = field(default_factory=dict)
    transport: Transport = "http"
    method: str = "POST"

    @property
    def gateway(self) -> Gateway:
        return self.services.gateway


@dataclass
class Decoded:
    """A generation request, decoded: what the spine and dispatch read of it, as data.

    ``routed``: the request routing describes and the cache keys (a chat, completion or
    embeddings request); ``plan``: what each deployment is sent; ``form``: a stream's
    pieces, OpenAI ``frames`` or chat ``chunks``; ``hosted``: the gateway's own tool loop;
    ``session_hint``: what the body says of its session; ``cached``: the answer type the
    response cache keeps for it (``None``: never cached); ``names``: the chat request's
    field names as the API names them (for a translated request); ``server_tools``: the
    upstream's own tools it offers (priced per use); ``call``: the API's own state, for
    its encoder."""

    model: str
    operation: str
    routed: Routable
    plan: Plan
    stream: bool = False
    form: Form = "frames"
    hosted: HostedLoop | None = None
    session_hint: SessionHint | None = None
    cached: type | None = None
    names: FieldNames | None = None
    server_tools: Mapping[str, int | None] = field(default_factory=dict)
    call: Any = None

    def rename(self, exc: GatewayError) -> GatewayError:
        """``exc`` with its field named as the API names it."""
        if self.names is not None:
            self.names.rename(exc)
        return exc


@dataclass
class Outcome:
    """What the spine got for a decoded call: a whole ``answer`` (from a deployment, or
    the cache when ``cached``), or the ``stream`` dispatch opened; what the deployment was
    sent; the headers the spine adds (which deployment and why, the limits left); the
    session the call was admitted in (an API that stores turns keeps it with them)."""

    answer: Any = None
    stream: ServedStream | None = None
    cached: bool = False
    sending: Sending | None = None
    headers: dict[str, str] = field(default_factory=dict)
    session: SessionId | None = None


@dataclass
class Reply:
    """What the spine writes: a whole ``body``, or a stream's ``frames`` (the spine
    settles the stream once they are written, or abandoned); ``media_type``: the body's
    (by default JSON; a stream's, server-sent events)."""

    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    status: int = 200
    media_type: str | None = None
    frames: AsyncIterator[bytes] | None = None


class Codec(Protocol):
    """A generation operation's two consultations (see the module docstring)."""

    async def decode(self, exchange: Exchange) -> Decoded:
        """The call of ``exchange`` (a 400 naming the field as the API names it)."""
        ...

    async def encode(self, decoded: Decoded, outcome: Outcome) -> Reply:
        """The reply to write for ``decoded``'s ``outcome``."""
        ...


Handler = Callable[[Exchange], Awaitable[Reply]]
"""Any other operation: an exchange in, a reply out."""


class Conversation(Protocol):
    """The state of one WebSocket connection of an operation: each client message becomes
    a call to run (a :class:`Decoded`) or a reply to send at once."""

    async def message(self, exchange: Exchange) -> Decoded | Reply:
        """What to do with one message (its text is ``exchange.body``)."""
        ...

    async def encode(self, decoded: Decoded, outcome: Outcome) -> Reply:
        """The reply for a call of this connection (it remembers what it needs)."""
        ...

    def error(self, exc: GatewayError) -> Reply:
        """A refused message, as this API says it on the socket (the socket stays open),
        with the status the access line records."""
        ...


@dataclass(frozen=True)
class Operation:
    """One operation of an API.

    ``name`` names it to telemetry and the access line; exactly one of ``codec`` (a
    generation) and ``handler`` serves it; ``socket`` opens a WebSocket conversation on the
    same path (``GET`` upgraded); ``max_body``: its body's bound; ``json_body``: its
    ``POST`` bodies are JSON (a browser's cross-origin form post is refused before any
    parsing); ``counted``: each call takes one request from the key's rate limit (a
    generation takes it, with its tokens, at admission); ``action``: a custom method in
    Google's style (``/models/{model}:generateContent``): the operation serves ``path``
    when its last path parameter ends in ``:action``, which the parameter's value then
    comes without (operations of one path and method are told apart by it)."""

    name: str
    path: str
    methods: tuple[str, ...] = ("POST",)
    codec: Codec | None = None
    handler: Handler | None = None
    socket: Callable[[Exchange], Conversation] | None = None
    max_body: int = MAX_BODY_BYTES
    json_body: bool = True
    counted: bool = True
    action: str | None = None

    @property
    def transports(self) -> frozenset[Transport]:
        return frozenset({"http", "websocket"} if self.socket is not None else {"http"})


ErrorBody = Callable[[GatewayError, int, str | None], tuple[int, bytes]]
"""An error in an API's shape: the status it is answered with, and the body (from the
error, its HTTP status and the request id)."""


@dataclass(frozen=True)
class KeySources:
    """Where an API's clients put their key: headers, in order (``authorization`` as a
    bearer token; any other as the key itself), and query parameters (never logged)."""

    headers: tuple[str, ...] = ("authorization",)
    query: tuple[str, ...] = ()


@dataclass(frozen=True)
class Api:
    """One client API: its ``operations``, where its clients put their key, its error
    shape, the path ``prefixes`` whose unrouted requests (404, 405) answer in that shape,
    and the state it keeps (``services``: made once per app from the state store, the config
    and the shared services; ``reconfigure``: given a reloaded config)."""

    name: str
    operations: tuple[Operation, ...]
    errors: ErrorBody
    keys: KeySources = KeySources()
    prefixes: tuple[str, ...] = ()
    services: Callable[[Any, Any, Services], Any] | None = None
    reconfigure: Callable[[Any, Any], None] | None = None


def custom_method(value: str) -> tuple[str, str | None]:
    """A path parameter's value without the custom method it ends in, and that method
    (``gemini:generateContent`` → ``gemini``, ``generateContent``; none: ``None``)."""
    head, colon, action = value.rpartition(":")
    if not colon or not action.isalnum():
        return value, None
    return head, action


def parse_body(model: type[M], body: bytes) -> M:
    """Validate a request body; errors become 400s naming the offending ``param``."""
    try:
        parsed = jsonio.validate_json(model, body)
    except ValidationError as exc:
        raise request_error(exc) from exc
    note_request(parsed)  # the span's sampling parameters, from this one parse
    return parsed


def query_error(name: str, value: str, expected: str) -> InvalidRequestError:
    """A 400 for the query parameter ``name``; its value is repeated only in part."""
    shown = (
        value
        if len(value) <= MAX_ECHOED
        else f"{value[:MAX_ECHOED]}...(+{len(value) - MAX_ECHOED} chars)"
    )
    return InvalidRequestError(
        f"Invalid value for '{name}': {shown!r}; expected {expected}.", param=name
    )


def openai_error(error: GatewayError, status: int, request_id: str | None) -> tuple[int, bytes]:
    """OpenAI's error object (the gateway's own shape: :meth:`GatewayError.to_body`), at
    the error's status."""
    return status, json.dumps(error.to_body()).encode()
