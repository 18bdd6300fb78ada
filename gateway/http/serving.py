"""The request path of chat, text completions, Responses, Messages and embeddings.

authenticate (the ``Authorization`` header, before the body is read) → parse → admit
(model scope, budget, key limits) → exact cache → dispatch (deployment limits, retries,
fallback, breakers, resumes: :mod:`gateway.dispatch`) → write → settle (actual tokens,
spend). Streams commit their HTTP status only once the first chunk has arrived; later
failures become the endpoint's in-band error frames.

What differs between the APIs is an :class:`~gateway.http.endpoint.Endpoint`, one per
API beside its route (:mod:`~gateway.http.chat`, :mod:`~gateway.http.completions`,
:mod:`~gateway.http.responses`, :mod:`~gateway.http.messages`); embeddings
(:mod:`~gateway.http.embeddings`) share the spine's admission and settling.

From admission on, a :class:`~gateway.http.asgi.ClientWatch` stands by: a client that
disconnects, or stops reading for longer than the send timeout, cancels the work wherever
it is (queue, backend call, stream), and admission gives back what was not used.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import structlog
from litestar.types import ASGIApp, Receive, Scope, Send

from backends.base import Backend
from gateway.admission.admit import Admission, AdmissionTicket
from gateway.admission.session_limits import SessionStoppedError
from gateway.admission.sessions import SessionId, session_of
from gateway.dispatch import Bill, Gateway, ServedStream, describe_request
from gateway.errors import GatewayError
from gateway.http.asgi import ClientWatch, EventStream, JSONBody
from gateway.http.endpoint import Endpoint, Req, Whole
from gateway.http.intake import Arrival, arrive
from gateway.protocol import ChatCompletionRequest, CompletionRequest
from gateway.protocol.frames import FrameStream
from gateway.protocol.parts import unread_part
from policies import RequestFacts

log = structlog.get_logger("shunter.api")


async def handle(
    scope: Scope, receive: Receive, send: Send, endpoint: Endpoint[Req, Whole]
) -> None:
    """Serve one generation request end to end.

    The generation endpoints are bare ASGI handlers: the request is read and answered
    here, without the framework's per-request signature parsing and response objects
    (errors still raise into the app's exception handlers)."""
    arrival = await arrive(scope, receive, endpoint.x_api_key)
    body = endpoint.parse(arrival.body)
    admitted, serve = await admit(arrival, endpoint, body)
    await respond(scope, receive, send, admitted, serve)


async def admit(
    arrival: Arrival, endpoint: Endpoint[Req, Whole], body: Req
) -> tuple[Admitted, Callable[[], Awaitable[ASGIApp]]]:
    """Prepare and admit a parsed request: the admitted request, and what serves it (the
    answer as an ASGI app), to run with :func:`answer`."""
    services = arrival.services
    with _client_names(endpoint, body):
        await endpoint.prepare(services, arrival.key, body)
        arrival.facts.update(model=body.model, stream=bool(body.stream))
        session = request_session(arrival, endpoint, body)
        if session is not None:
            arrival.facts["session"] = session.id
        try:
            ticket = await services.admission.admit(endpoint.facts(body), arrival.key, session)
        except SessionStoppedError as exc:
            if not exc.should_retry:  # stopped, not only waiting for its requests in flight
                arrival.facts["session_stop"] = exc.reason
            raise
    admitted = Admitted(arrival, ticket)

    def serve() -> Awaitable[ASGIApp]:
        return _serve(admitted, endpoint, body)

    return admitted, serve


@contextmanager
def _client_names(endpoint: Endpoint[Req, Whole], body: Req) -> Iterator[None]:
    """A failure names its field as the API the client called does: the one place a
    translated request's chat names (a backend's, routing's, an upstream's) are renamed
    (:mod:`gateway.protocol.fieldnames`), whatever raised them."""
    try:
        yield
    except GatewayError as exc:
        _renamed(endpoint, body, exc)
        raise


def _renamed(endpoint: Endpoint[Req, Whole], body: Req, exc: GatewayError) -> GatewayError:
    """``exc`` with its field named as the API the client called names it."""
    names = endpoint.field_names(body)
    if names is not None:
        names.rename(exc)
    return exc


def request_session(
    arrival: Arrival, endpoint: Endpoint[Req, Whole], body: Req
) -> SessionId | None:
    """The session of a prepared request: its header, else its body's id, else its
    conversation (text completions without an id have none)."""
    routed = endpoint.request(body)
    chat = routed if isinstance(routed, ChatCompletionRequest) else None
    hint = endpoint.session_hint(body)
    session = session_of(arrival.key.id, header=arrival.session_header, hint=hint, chat=chat)
    if session is not None:
        endpoint.note_session(body, session)
    return session


class Admitted:
    """One admitted request on its way through dispatch: what settles it and what its
    log line says."""

    def __init__(self, arrival: Arrival, ticket: AdmissionTicket) -> None:
        self.gateway: Gateway = arrival.gateway
        self.services = arrival.services
        self.admission: Admission = arrival.services.admission
        self.ticket = ticket
        self.facts = arrival.facts
        self.request_id = arrival.request_id

    @property
    def session_id(self) -> str | None:
        """The request's session (a routing hint: one session, one conversation)."""
        return self.ticket.session_id

    async def admit(self, deployment: str) -> None:
        """Take the deployment's own limits before it is tried."""
        await self.admission.admit_deployment(self.ticket, deployment)

    async def settle(self, bill: Bill) -> None:
        """Settle the ticket with what was used, and say so in the log line."""
        await self.admission.settle(self.ticket, bill.usage, bill.cost_usd)
        self.facts.update(bill.facts)

    def headers(self, routed: dict[str, str]) -> dict[str, str]:
        """``routed``'s headers, then admission's (remaining limits, spend)."""
        return {**routed, **self.admission.headers(self.ticket)}


async def respond(
    scope: Scope,
    receive: Receive,
    send: Send,
    admitted: Admitted,
    serve: Callable[[], Awaitable[ASGIApp]],
) -> None:
    """Run ``serve`` and write its response while a :class:`ClientWatch` stands by. A
    client that leaves (or stops reading) ends both quietly: there is no one to answer."""
    watch = ClientWatch(receive, send, admitted.services.send_timeout_s)
    watch.start(scope)
    try:
        response = await answer(admitted, serve)
        await response(scope, receive, watch.send)
    except (asyncio.CancelledError, Exception):
        if watch.gone is None:
            raise
        admitted.facts["client_gone"] = watch.gone
    finally:
        watch.stop()


async def answer(admitted: Admitted, serve: Callable[[], Awaitable[ASGIApp]]) -> ASGIApp:
    """``serve``'s answer; if it fails before answering, the ticket is given back (or
    settled, once a deployment took it)."""
    admission, ticket = admitted.admission, admitted.ticket
    try:
        return await serve()
    except BaseException:
        if ticket.deployment is None:
            await admission.release(ticket)
        else:
            await admission.settle(ticket, None)
        raise


async def _serve(admitted: Admitted, endpoint: Endpoint[Req, Whole], body: Req) -> ASGIApp:
    """The answer from the cache, else from a deployment, whole or streamed."""
    with _client_names(endpoint, body):
        return await _served(admitted, endpoint, body)


async def _served(admitted: Admitted, endpoint: Endpoint[Req, Whole], body: Req) -> ASGIApp:
    routed = endpoint.request(body)
    cache = admitted.services.cache
    cache_key = cache.key(routed, admitted.ticket.key.id) if endpoint.cacheable(body) else None
    if cache_key is not None:
        hit = await cache.get(cache_key, endpoint.cached)  # type: ignore[type-var]
        if hit is not None:
            return await _cached(admitted, endpoint, body, hit)
    routing_facts = describe_request(routed, admitted.request_id, admitted.session_id)
    if not routing_facts.content_parts <= _TEXT and isinstance(routed, ChatCompletionRequest):
        _refuse_unread_parts(admitted.gateway, body.model, routed, routing_facts)
    if body.stream:
        return await _stream(admitted, endpoint, body, routed, routing_facts)

    gateway, operation = admitted.gateway, endpoint.operation

    def whole(backend: Backend) -> Awaitable[Whole]:
        return endpoint.whole(backend, body, gateway.answering_model(backend.name))

    answered = await gateway.call(body.model, whole, operation, admitted.admit, routing_facts)
    result = answered.value
    admitted.facts.update(deployment=answered.deployment, route=answered.reason)
    await admitted.settle(answered.bill(result.usage))
    if cache_key is not None and isinstance(result, endpoint.cached):
        await cache.put(cache_key, result)
    headers = admitted.headers(answered.headers(result.usage)) | endpoint.answer_headers(body)
    return JSONBody(await endpoint.render(body, result), headers)


_TEXT = frozenset({"text"})  # what every deployment reads


def _refuse_unread_parts(
    gateway: Gateway, model: str, routed: ChatCompletionRequest, facts: RequestFacts
) -> None:
    """A 400 naming the first content part whose kind no deployment of the model reads (a
    kind some deployment reads is routed to one that does, as any other request). The part
    is named by its chat path; the spine names it as the called API does."""
    pool = gateway.policy_candidates(model, live=False)
    if not pool:
        return
    unread = {
        kind
        for kind in facts.content_parts
        if not any(c.facts.capabilities.reads(kind) for c in pool)
    }
    first = routed.first_part(unread)
    if first is not None:
        field, kind = first
        raise unread_part(kind, field, f"The model '{model}'")


async def _cached(
    admitted: Admitted, endpoint: Endpoint[Req, Whole], body: Req, hit: Any
) -> ASGIApp:
    """A cache hit: nothing to charge, written as the client asked for it."""
    await admitted.admission.settle(admitted.ticket, None)
    admitted.facts["cache"] = "hit"
    headers = admitted.headers({"x-shunter-cache": "hit"}) | endpoint.answer_headers(body)
    if body.stream:
        return EventStream(endpoint.replay(body, hit), headers)
    return JSONBody(await endpoint.render(body, hit), headers)


async def _stream(
    admitted: Admitted,
    endpoint: Endpoint[Req, Whole],
    body: Req,
    routed: ChatCompletionRequest | CompletionRequest,
    routing_facts: RequestFacts,
) -> ASGIApp:
    """Open the stream on the first deployment that answers; write it as it comes."""

    def start(backend: Backend) -> FrameStream:
        return endpoint.stream(backend, body, admitted.gateway.answering_model(backend.name))

    started, facts = time.perf_counter(), admitted.facts
    stream = await admitted.gateway.open_stream(
        body.model,
        start,
        endpoint.operation,
        admitted.admit,
        routing_facts,
        resumable=routed,
        framed=endpoint.framed,
        facts=facts,
    )
    ttft_ms = round((time.perf_counter() - started) * 1000, 2)
    facts.update(deployment=stream.deployment, route=stream.reason, ttft_ms=ttft_ms)

    def end(failure: GatewayError | None) -> bytes:
        said = None if failure is None else _renamed(endpoint, body, failure)
        return endpoint.end(body, stream, said)

    frames = _sse(stream, facts, admitted.settle, end)
    headers = admitted.headers(stream.headers) | endpoint.answer_headers(body)
    return EventStream(frames, headers)


async def _sse(
    stream: ServedStream,
    facts: dict[str, Any],
    settle: Callable[[Bill], Awaitable[None]],
    end: Callable[[GatewayError | None], bytes],
) -> AsyncIterator[bytes]:
    """Write frames as they come, then the endpoint's ending: after a failure nothing
    could continue, its in-band error frames."""
    failure = None
    try:
        yield stream.first
        async for data in stream.rest:
            yield data
    except GatewayError as exc:
        failure = exc
    except Exception:
        log.exception("stream_failed", deployment=stream.deployment)
        failure = GatewayError("The stream failed on the server; it is incomplete.")
    finally:
        # a client disconnect cancels this generator; finishing the books must still run
        with anyio.CancelScope(shield=True):
            await settle(await stream.close())
    if failure is not None:
        facts.update(stream_error=failure.message)
    last = end(failure)
    if last:
        yield last
