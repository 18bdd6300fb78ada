"""The request path of every generation API, read top to bottom:

arrive (the key, before the body is read; the body, bounded: :mod:`gateway.http.intake`)
→ decode (the API) → admit (model scope, budget, key and session limits, from the one
description of the request) → the cache → dispatch (deployment limits, retries, fallback,
breakers, resumes: :mod:`gateway.dispatch`) → encode (the API) → write → settle (actual
tokens, spend). Streams commit their HTTP status only once the first piece has arrived;
later failures become the API's in-band error frames, written by its encoder.

Each layer is entered once and hands the next a whole object: the API's
:class:`~gateway.apis.contract.Decoded` call, then an :class:`Admitted` request, then
dispatch's :class:`~gateway.dispatch.Work`. Nothing below calls back into this module or
into the API between its two consultations.

From admission on, a :class:`~gateway.http.asgi.ClientWatch` stands by: a client that
disconnects, or stops reading for longer than the send timeout, cancels the work wherever
it is (queue, backend call, stream), and admission gives back what was not used. A
WebSocket message runs the same path (:mod:`gateway.http.socket`), written as messages.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import anyio
from litestar.types import ASGIApp, Receive, Scope, Send

from gateway.admission.admit import AdmissionTicket
from gateway.admission.session_limits import SessionStoppedError
from gateway.admission.sessions import SessionId, session_header, session_of
from gateway.apis.contract import Codec, Conversation, Decoded, Exchange, Outcome, Reply
from gateway.dispatch import ServedStream, Work, describe_request
from gateway.errors import GatewayError
from gateway.http.asgi import EVENTS, JSON, ClientWatch, EventStream, JSONBody
from gateway.protocol import ChatCompletion, ChatCompletionRequest, Completion
from gateway.protocol.parts import unread_part
from policies import RequestFacts

Encoder = Codec | Conversation
_TEXT = frozenset({"text"})  # what every deployment reads


class Admitted:
    """One admitted call on its way through dispatch: the exchange it came in, the API's
    decoded call, the one description admission and routing read, its ticket, and the
    session it was admitted in."""

    __slots__ = ("decoded", "exchange", "facts", "session", "stream", "ticket")

    def __init__(
        self,
        exchange: Exchange,
        decoded: Decoded,
        facts: RequestFacts,
        ticket: AdmissionTicket,
        session: SessionId | None = None,
    ) -> None:
        self.exchange = exchange
        self.decoded = decoded
        self.facts = facts
        self.ticket = ticket
        self.session = session
        self.stream: ServedStream | None = None
        """The stream dispatch opened for it, once it did."""

    def work(self) -> Work:
        """The call as dispatch runs it."""
        decoded, services = self.decoded, self.exchange.services
        return Work(
            decoded.model,
            decoded.operation,
            decoded.routed,
            self.facts,
            decoded.plan,
            decoded.stream,
            decoded.form,
            decoded.hosted,
            services.admission,
            self.ticket,
            self.exchange.facts,
        )

    def headers(self, routed: dict[str, str]) -> dict[str, str]:
        """``routed``'s headers, then admission's (remaining limits, spend)."""
        return {**routed, **self.exchange.services.admission.headers(self.ticket)}

    async def settle(self, usage: Any, cost: float | None, facts: dict[str, Any]) -> None:
        await self.exchange.services.admission.settle(self.ticket, usage, cost)
        self.exchange.facts.update(facts)


async def generate(
    scope: Scope, receive: Receive, send: Send, exchange: Exchange, codec: Codec
) -> None:
    """Serve one generation request end to end, written as HTTP."""
    decoded = await _decoded(codec, exchange)
    admitted = await admit(exchange, decoded)
    watch = ClientWatch(receive, send, scope["app"].state.spine.send_timeout_s)
    watch.start(scope)
    try:
        reply = await answer(admitted, codec)
        await as_asgi(reply, admitted)(scope, receive, watch.send)
    except (asyncio.CancelledError, Exception):
        if watch.gone is None:
            raise
        exchange.facts["client_gone"] = watch.gone
    finally:
        watch.stop()


async def _decoded(codec: Codec, exchange: Exchange) -> Decoded:
    decoded = await codec.decode(exchange)
    exchange.facts.update(model=decoded.model, stream=decoded.stream)
    return decoded


async def admit(exchange: Exchange, decoded: Decoded) -> Admitted:
    """The call admitted: its session (a header, the body's hint, else its conversation),
    its one description, then the key's and the session's limits (or a refusal naming the
    field as the API does)."""
    services = exchange.services
    routed = decoded.routed
    chat = routed if isinstance(routed, ChatCompletionRequest) else None
    header = session_header(exchange.headers)
    session = session_of(exchange.key.id, header=header, hint=decoded.session_hint, chat=chat)
    session_id = None if session is None else session.id
    if session_id is not None:
        exchange.facts["session"] = session_id
    prefixes = services.gateway.reads_prefixes(decoded.model)
    facts = describe_request(routed, exchange.request_id, session_id, prefixes=prefixes)
    if decoded.server_tools:
        facts = replace(facts, server_tools=decoded.server_tools)
    expected = services.gateway.expected_prompts(decoded.model, facts)
    if expected:
        facts = replace(facts, upstream_prompt_tokens=expected)
    try:
        ticket = await services.admission.admit(decoded.model, facts, exchange.key, session)
    except SessionStoppedError as exc:
        if not exc.should_retry:  # stopped, not only waiting for its requests in flight
            exchange.facts["session_stop"] = exc.reason
        raise decoded.rename(exc) from None
    except GatewayError as exc:
        raise decoded.rename(exc) from None
    return Admitted(exchange, decoded, facts, ticket, session)


async def answer(admitted: Admitted, encoder: Encoder) -> Reply:
    """The reply to an admitted call; if it fails before replying, the ticket is given
    back (or settled, once a deployment took it), and the failure names its field as the
    API does."""
    admission, ticket = admitted.exchange.services.admission, admitted.ticket
    try:
        outcome = await _outcome(admitted)
        outcome.session = admitted.session
        return await encoder.encode(admitted.decoded, outcome)
    except BaseException as exc:
        if ticket.deployment is None:
            await admission.release(ticket)
        else:
            await admission.settle(ticket, None)
        if isinstance(exc, GatewayError):
            raise admitted.decoded.rename(exc) from None
        raise


async def _outcome(admitted: Admitted) -> Outcome:
    """The answer from the cache, else from a deployment, whole or streamed."""
    decoded, services = admitted.decoded, admitted.exchange.services
    cache = services.cache
    cache_key = None
    if decoded.cached is not None:
        cache_key = cache.key(decoded.routed, admitted.ticket.key.id)  # type: ignore[arg-type]
    if cache_key is not None:
        hit = await cache.get(cache_key, decoded.cached)  # type: ignore[arg-type]
        if hit is not None:
            await services.admission.settle(admitted.ticket, None)
            admitted.exchange.facts["cache"] = "hit"
            return Outcome(hit, cached=True, headers=admitted.headers({"x-shunter-cache": "hit"}))
    if not admitted.facts.content_parts <= _TEXT:
        _refuse_unread_parts(admitted)
    gateway = services.gateway
    if decoded.stream:
        started = time.perf_counter()
        stream = admitted.stream = await gateway.open(admitted.work())
        ttft_ms = round((time.perf_counter() - started) * 1000, 2)
        admitted.exchange.facts.update(
            deployment=stream.deployment, route=stream.reason, ttft_ms=ttft_ms
        )
        return Outcome(
            stream=stream, sending=stream.sending, headers=admitted.headers(stream.headers)
        )
    routed = await gateway.answer(admitted.work())
    result, usage = routed.value, routed.usage
    admitted.exchange.facts.update(deployment=routed.deployment, route=routed.reason)
    bill = routed.bill(usage)
    await admitted.settle(bill.usage, bill.cost_usd, bill.facts)
    if cache_key is not None and isinstance(result, ChatCompletion | Completion):
        await cache.put(cache_key, result)
    headers = admitted.headers(routed.headers(usage))
    return Outcome(result, sending=routed.sending, headers=headers)


def _refuse_unread_parts(admitted: Admitted) -> None:
    """A 400 naming the first content part whose kind no deployment of the model reads (a
    kind some deployment reads is routed to one that does, as any other request)."""
    decoded, facts = admitted.decoded, admitted.facts
    routed = decoded.routed
    if not isinstance(routed, ChatCompletionRequest):
        return
    pool = admitted.exchange.services.gateway.policy_candidates(decoded.model, live=False)
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
        raise unread_part(kind, field, f"The model '{decoded.model}'")


def as_asgi(reply: Reply, admitted: Admitted | None = None) -> ASGIApp:
    """``reply`` as the ASGI app that writes it; a stream's frames settle its call once
    written or abandoned."""
    if reply.frames is None:
        return JSONBody(reply.body, reply.headers, reply.status, reply.media_type or JSON)
    frames = reply.frames
    if admitted is not None:
        frames = settling(frames, admitted)
    return EventStream(frames, reply.headers, reply.media_type or EVENTS)


async def settling(frames: AsyncIterator[bytes], admitted: Admitted) -> AsyncIterator[bytes]:
    """``frames`` as they come; then the stream's books are closed and its call settled,
    also when the client left (the failure nothing could continue goes to the log)."""
    stream = admitted.stream
    try:
        async for data in frames:
            yield data
    finally:
        # a client disconnect cancels this generator; finishing the books must still run
        with anyio.CancelScope(shield=True):
            close = getattr(frames, "aclose", None)
            if close is not None:
                await close()
            if stream is not None:
                bill = await stream.close()
                await admitted.settle(bill.usage, bill.cost_usd, bill.facts)
                if stream.failure is not None:
                    admitted.exchange.facts["stream_error"] = stream.failure.message
