"""The request path of chat, text completions, Responses, Messages and embeddings.

authenticate (the ``Authorization`` header, before the body is read) → parse → admit
(model scope, budget, key limits) → exact cache → dispatch (deployment limits, retries,
fallback, breakers) → respond → settle (actual tokens, spend). Streams commit their HTTP
status only once the first chunk has arrived; later failures become an in-band error frame.

Every generation API is an :class:`Endpoint`: how it parses a body, what admission and
routing see, how one backend answers it whole or streamed, how an answer is written and how
a stream ends. Chat and completions are the backends' own contract; Responses and Messages
translate to chat (or pass through to a backend that speaks them natively) in
:mod:`gateway.http.apis`.

From admission on, a :class:`~gateway.http.asgi.ClientWatch` stands by: a client that
disconnects, or stops reading for longer than the send timeout, cancels the work wherever
it is (queue, backend call, stream), and admission gives back what was not used.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import anyio
import structlog
from litestar.exceptions import ClientException, MethodNotAllowedException
from litestar.exceptions.http_exceptions import RequestEntityTooLarge
from litestar.types import ASGIApp, Receive, Scope, Send
from pydantic import BaseModel, ValidationError

from backends.base import Backend, EmbeddingsBackend, cost_usd
from gateway.admission.admit import Admission, AdmissionTicket, RequestFacts
from gateway.admission.cache import ResponseCache, chat_chunks, completion_chunks
from gateway.admission.keys import KeyInfo
from gateway.dispatch.attempts import Candidate
from gateway.dispatch.cascade import CascadeReport, cascade_headers
from gateway.dispatch.resume import Resume
from gateway.dispatch.router import Gateway, OpenedStream
from gateway.dispatch.routing import describe_request
from gateway.dispatch.stall import stall_guard
from gateway.errors import GatewayError, InvalidRequestError, ServiceUnavailableError
from gateway.http.asgi import ClientWatch, EventStream, JSONBody
from gateway.ingress.store import ResponseStore
from gateway.protocol import (
    ChatCompletion,
    ChatCompletionRequest,
    Completion,
    CompletionRequest,
    EmbeddingRequest,
    EmbeddingResponse,
    Usage,
    jsonio,
)
from gateway.protocol.frames import Framed, FrameStream, RawChatBackend
from gateway.protocol.sse import DONE, error_frame, frame
from gateway.protocol.validation import request_error
from gateway.telemetry.tracing import note_request

M = TypeVar("M", bound=BaseModel)
log = structlog.get_logger("shunter.api")
MAX_BODY_BYTES = 10_000_000  # as the framework's default for its own handlers


class Served(Protocol):
    """What the request path reads of any parsed generation request."""

    @property
    def model(self) -> str: ...

    @property
    def stream(self) -> bool | None: ...

    def include_usage(self) -> bool: ...


class Answer(Protocol):
    """What the request path reads of any whole answer: its usage, for settling."""

    @property
    def usage(self) -> Usage | None: ...


Req = TypeVar("Req", bound=Served)
Whole = TypeVar("Whole", bound=Answer)


@dataclass(frozen=True)
class Endpoint(Generic[Req, Whole]):
    """How one generation API maps onto the backends, from body to last byte.

    ``parse`` reads the body; ``prepare`` (when set) completes the request once the caller
    is known (a stored conversation); ``facts`` is what admission reserves; ``chat`` is
    the chat (or completion) request that the cache keys and routing describe;
    ``whole`` / ``stream`` run it on one backend; ``render`` writes a whole answer (and a
    cache hit of ``cached``); ``replay`` writes a cache hit as a stream; ``end`` gives the
    last bytes of a stream: after a complete one, or the in-band error frames after a
    failure. ``x_api_key``: the key may come in ``x-api-key`` (Anthropic's header).
    ``framed``: its streams are OpenAI chunk frames, which a resume can read back (the
    translated APIs are resumed through their translator instead)."""

    operation: str
    parse: Callable[[bytes], Req]
    facts: Callable[[Req], RequestFacts]
    chat: Callable[[Req], ChatCompletionRequest | CompletionRequest]
    whole: Callable[[Backend, Req], Awaitable[Whole]]
    stream: Callable[[Backend, Req], FrameStream]
    cached: type[ChatCompletion] | type[Completion]
    replay: Callable[[Req, Any], AsyncIterator[bytes]]
    end: Callable[[Req, OpenedStream, GatewayError | None], bytes]
    render: Callable[[Req, Whole], Awaitable[bytes]]
    prepare: Callable[[Services, KeyInfo, Req], Awaitable[None]] | None = None
    x_api_key: bool = False
    framed: bool = False


async def dump(_: object, answer: BaseModel) -> bytes:
    """A whole answer as JSON (``render`` of the APIs whose answers are the backends')."""
    return jsonio.to_json(answer)


def _openai_end(body: Served, opened: OpenedStream, failure: GatewayError | None) -> bytes:
    """Chat and completions: an error frame after a failure; the usage frame only for
    clients that asked for it; ``[DONE]`` in every case."""
    if failure is not None:
        return error_frame(failure) + DONE
    usage_frame = opened.rest.usage_frame
    if usage_frame is not None and body.include_usage():
        return usage_frame + DONE
    return DONE


def _same(body: Any) -> Any:
    return body


CHAT: Endpoint[ChatCompletionRequest, ChatCompletion] = Endpoint(
    "chat",
    lambda raw: parse_body(ChatCompletionRequest, raw),
    RequestFacts.of_chat,
    _same,
    lambda backend, body: backend.chat(body),
    lambda backend, body: (
        backend.chat_stream_raw(body)
        if isinstance(backend, RawChatBackend)
        else Framed(backend.chat_stream(body))
    ),
    ChatCompletion,
    lambda body, hit: _replay(chat_chunks(hit), body.include_usage()),
    _openai_end,
    dump,
    framed=True,
)
COMPLETION: Endpoint[CompletionRequest, Completion] = Endpoint(
    "text_completion",
    lambda raw: parse_body(CompletionRequest, raw),
    RequestFacts.of_completion,
    _same,
    lambda backend, body: backend.completion(body),
    lambda backend, body: Framed(backend.completion_stream(body)),
    Completion,
    lambda body, hit: _replay(completion_chunks(hit), body.include_usage()),
    _openai_end,
    dump,
    framed=True,
)


@dataclass
class Services:
    """What the request path uses besides the gateway; one per app.

    ``send_timeout_s``: how long one write may wait for a client that stopped reading;
    ``protect_ops``: whether ``/metrics`` and readiness figures need the master key;
    ``responses``: the stored responses of ``/v1/responses``."""

    admission: Admission
    cache: ResponseCache
    responses: ResponseStore
    send_timeout_s: float = 30.0
    protect_ops: bool = False


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


async def handle(
    scope: Scope, receive: Receive, send: Send, endpoint: Endpoint[Req, Whole]
) -> None:
    """Serve one generation request end to end.

    The generation endpoints are bare ASGI handlers: the request is read and answered
    here, without the framework's per-request signature parsing and response objects
    (errors still raise into the app's exception handlers)."""
    services, gateway, key = await _authenticated(scope, endpoint.x_api_key)
    body = endpoint.parse(await read_body(scope, receive))
    if endpoint.prepare is not None:
        await endpoint.prepare(services, key, body)
    facts = request_facts(scope)
    facts.update(model=body.model, stream=bool(body.stream))
    ticket = await services.admission.admit(endpoint.facts(body), key)
    request_id: str = scope["state"].get("request_id", "")

    def serve() -> Awaitable[ASGIApp]:
        return _serve(gateway, services, ticket, endpoint, body, facts, request_id)

    await _respond(scope, receive, send, services, ticket, serve)


async def handle_embeddings(scope: Scope, receive: Receive, send: Send) -> None:
    """Serve ``POST /v1/embeddings`` through the same admission as generation: the key
    (before the body is read), its model scope, limits and budget, each deployment's
    limits; settled with the real input tokens at the deployment's input price."""
    services, gateway, key = await _authenticated(scope)
    body = parse_body(EmbeddingRequest, await read_body(scope, receive))
    facts = request_facts(scope)
    facts["model"] = body.model
    ticket = await services.admission.admit(RequestFacts.of_embeddings(body), key)
    request_id: str = scope["state"].get("request_id", "")

    def serve() -> Awaitable[ASGIApp]:
        return _embed(gateway, services.admission, ticket, body, facts, request_id)

    await _respond(scope, receive, send, services, ticket, serve)


async def _authenticated(
    scope: Scope, x_api_key: bool = False
) -> tuple[Services, Gateway, KeyInfo]:
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


async def _respond(
    scope: Scope,
    receive: Receive,
    send: Send,
    services: Services,
    ticket: AdmissionTicket,
    serve: Callable[[], Awaitable[ASGIApp]],
) -> None:
    """Run ``serve`` and write its response while a :class:`ClientWatch` stands by. A
    client that leaves (or stops reading) ends both quietly: there is no one to answer."""
    admission = services.admission
    watch = ClientWatch(receive, send, services.send_timeout_s)
    watch.start(scope)
    try:
        try:
            response = await serve()
        except BaseException:
            if ticket.deployment is None:
                await admission.release(ticket)
            else:
                await admission.settle(ticket, None)
            raise
        await response(scope, receive, watch.send)
    except (asyncio.CancelledError, Exception):
        if watch.gone is None:
            raise
        request_facts(scope)["client_gone"] = watch.gone
    finally:
        watch.stop()


async def read_body(scope: Scope, receive: Receive, limit: int = MAX_BODY_BYTES) -> bytes:
    """The request body; 413 past ``limit`` bytes (announced or received)."""
    announced = _header(scope, b"content-length")
    if announced is not None and announced.isdigit() and int(announced) > limit:
        raise RequestEntityTooLarge
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientException("The client went away before sending the whole body.")
        chunk: bytes = message.get("body", b"")  # type: ignore[assignment]
        if chunk:
            size += len(chunk)
            if size > limit:
                raise RequestEntityTooLarge
            parts.append(chunk)
        if not message.get("more_body", False):
            return parts[0] if len(parts) == 1 else b"".join(parts)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


async def _serve(
    gateway: Gateway,
    services: Services,
    ticket: AdmissionTicket,
    endpoint: Endpoint[Req, Whole],
    body: Req,
    facts: dict[str, Any],
    request_id: str,
) -> ASGIApp:
    admission, cache = services.admission, services.cache
    chat = endpoint.chat(body)
    cache_key = cache.key(chat, ticket.key.id)
    if cache_key is not None:
        hit = await cache.get(cache_key, endpoint.cached)  # type: ignore[type-var]
        if hit is not None:
            await admission.settle(ticket, None)
            facts["cache"] = "hit"
            headers = {"x-shunter-cache": "hit", **admission.headers(ticket)}
            if body.stream:
                return EventStream(endpoint.replay(body, hit), headers)
            return JSONBody(await endpoint.render(body, hit), headers)  # type: ignore[arg-type]

    async def admit(candidate: Candidate) -> None:
        await admission.admit_deployment(ticket, candidate.settings.name)

    routing_facts = describe_request(chat, request_id)
    if body.stream:
        started = time.perf_counter()
        opened = await gateway.open_stream(
            body.model, lambda b: endpoint.stream(b, body), endpoint.operation, admit, routing_facts
        )
        facts.update(
            deployment=opened.candidate.settings.name,
            route=opened.reason,
            ttft_ms=_ms_since(started),
        )
        chosen = opened.candidate  # the headers name it, whoever continues the stream
        resume = Resume.begin(gateway, opened, chat, admit, facts, endpoint.framed)

        async def settle(usage: Usage | None) -> None:
            opened.attempt.finish(usage.completion_tokens if usage else None)
            cost = resume.cost(usage) if resume is not None else None
            facts.update(await _settled(admission, ticket, chosen, usage, cost, opened.cascade))

        def end(failure: GatewayError | None) -> bytes:
            return endpoint.end(body, opened, failure)

        frames = _sse(opened, facts, settle, end, resume)
        headers = {**_route_headers(chosen, opened.reason), **admission.headers(ticket)}
        headers.update(cascade_headers(opened.cascade, chosen.settings.price, None))
        return EventStream(frames, headers)

    routed = await gateway.call(
        body.model, lambda b: endpoint.whole(b, body), endpoint.operation, admit, routing_facts
    )
    chosen, result = routed.candidate, routed.value
    facts.update(deployment=chosen.settings.name, route=routed.reason)
    facts.update(await _settled(admission, ticket, chosen, result.usage, None, routed.cascade))
    if cache_key is not None and isinstance(result, endpoint.cached):
        await cache.put(cache_key, result)
    headers = {**_route_headers(chosen, routed.reason), **admission.headers(ticket)}
    headers.update(cascade_headers(routed.cascade, chosen.settings.price, result.usage))
    return JSONBody(await endpoint.render(body, result), headers)


async def _embed(
    gateway: Gateway,
    admission: Admission,
    ticket: AdmissionTicket,
    body: EmbeddingRequest,
    facts: dict[str, Any],
    request_id: str,
) -> ASGIApp:
    async def admit(candidate: Candidate) -> None:
        await admission.admit_deployment(ticket, candidate.settings.name)

    async def embed(backend: Backend) -> EmbeddingResponse:
        if not isinstance(backend, EmbeddingsBackend) or not backend.capabilities.embeddings:
            raise InvalidRequestError(
                f"The model '{body.model}' does not serve embeddings.", param="model"
            )
        return await backend.embeddings(body)

    routing_facts = describe_request(body, request_id)
    routed = await gateway.call(body.model, embed, "embeddings", admit, routing_facts)
    chosen, result = routed.candidate, routed.value
    # an upstream that reports no usage is charged the estimate admission reserved
    usage = Usage.of(result.usage.prompt_tokens or ticket.tokens, 0)
    facts.update(deployment=chosen.settings.name, route=routed.reason)
    facts.update(await _settled(admission, ticket, chosen, usage))
    headers = {"x-shunter-deployment": chosen.settings.name, "x-shunter-route": routed.reason}
    return json_response(result, {**headers, **admission.headers(ticket)})


async def _settled(
    admission: Admission,
    ticket: AdmissionTicket,
    chosen: Candidate,
    usage: Usage | None,
    cost: float | None = None,
    cascade: CascadeReport | None = None,
) -> dict[str, Any]:
    """Settle the ticket at ``cost`` (by default ``usage`` at ``chosen``'s price), with the
    answers a cascade judged and dropped on the way."""
    if cascade is not None and cascade.steps:
        bill = cascade.bill(chosen.settings.price, usage, cost)
        await admission.settle(ticket, bill.usage, bill.cost_usd)
        return bill.facts
    if usage is None:
        await admission.settle(ticket, None)
        return {}
    if cost is None:
        cost = cost_usd(chosen.settings.price, usage.prompt_tokens, usage.completion_tokens)
    await admission.settle(ticket, usage, cost)
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "cost_usd": round(cost, 8),
    }


async def _sse(
    opened: OpenedStream,
    facts: dict[str, Any],
    on_end: Callable[[Usage | None], Awaitable[None]],
    end: Callable[[GatewayError | None], bytes],
    resume: Resume | None = None,
) -> AsyncIterator[bytes]:
    """Write frames as they come, then the endpoint's ending. A failure after the first
    byte is continued on another candidate where ``resume`` can; otherwise it becomes the
    endpoint's in-band error frames."""
    stream, failure = stall_guard(opened.rest, opened.candidate), None
    sent = resume.sent if resume is not None else None  # references only: parsed on failure
    try:
        yield opened.first
        while True:
            try:
                if sent is None:
                    async for data in stream:
                        yield data
                else:
                    async for data in stream:
                        sent.append(data)
                        yield data
                break
            except Exception as exc:
                continued = await resume.after(exc, stream) if resume is not None else None
                if continued is None:
                    raise
                stream = continued
            assert resume is not None
            yield resume.note
    except GatewayError as exc:
        failure = exc
    except Exception:
        log.exception("stream_failed", deployment=opened.candidate.settings.name)
        failure = GatewayError("The stream failed on the server; it is incomplete.")
    finally:
        # a client disconnect cancels this generator; finishing the books must still run
        with anyio.CancelScope(shield=True):
            await _aclose(stream)
            await on_end(stream.usage)
    if failure is not None:
        facts.update(stream_error=failure.message)
    last = end(failure)
    if last:
        yield last


async def _replay(chunks: list[Any], include_usage: bool) -> AsyncIterator[bytes]:
    for chunk in chunks:
        if chunk.choices or include_usage:
            yield frame(chunk)
    yield DONE


async def _aclose(iterator: AsyncIterator[Any]) -> None:
    close = getattr(iterator, "aclose", None)
    if close is not None:
        await close()


def _route_headers(chosen: Candidate, reason: str) -> dict[str, str]:
    return {
        "x-shunter-deployment": chosen.settings.name,
        "x-shunter-upstream-model": chosen.settings.model,
        "x-shunter-route": reason,
        "cache-control": "no-cache",
    }


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)
