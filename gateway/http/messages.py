"""``/v1/messages``: Anthropic's Messages API on the shared request path.

A request routed to a backend whose upstream speaks Messages itself (``anthropic``) is
passed through as the client sent it; one routed elsewhere is translated to the gateway's
chat request (:mod:`gateway.ingress.messages`) under that deployment's rules. Besides,
``POST /v1/messages/count_tokens``, and errors on these routes in Anthropic's shape.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from litestar import asgi
from litestar.exceptions import MethodNotAllowedException
from litestar.types import Receive, Scope, Send

from backends.base import Backend
from gateway.admission.admit import RequestFacts
from gateway.admission.cache import chat_chunks, replay
from gateway.admission.keys import KeyInfo
from gateway.admission.sessions import SessionHint, claude_session
from gateway.dispatch import ServedStream, describe_request
from gateway.errors import GatewayError, InvalidRequestError
from gateway.hosted import messages as hosted_tools
from gateway.hosted.message_stream import HostedMessageEvents
from gateway.http.abilities import native_messages, token_counter
from gateway.http.asgi import JSONBody
from gateway.http.endpoint import Endpoint, answered_by
from gateway.http.intake import (
    Services,
    credentials,
    read_body,
    request_facts,
    taking_work,
)
from gateway.http.serving import handle
from gateway.ingress.message_answer import message_answer
from gateway.ingress.message_events import MessageEvents
from gateway.ingress.messages import FORWARDED_HEADERS, MessagesCall, NativeMessage
from gateway.ingress.translate import sse
from gateway.protocol import ChatCompletion, ChatCompletionRequest
from gateway.protocol.fieldnames import FieldNames
from gateway.protocol.frames import FrameStream
from gateway.protocol.messages import (
    CountTokensRequest,
    anthropic_status,
    error_body,
    error_message,
)
from gateway.telemetry.tracing import note_request

Answered = ChatCompletion | NativeMessage


class MessagesEndpoint(Endpoint[MessagesCall, Answered]):
    """One per request: it carries the client's headers that a Messages upstream gets."""

    operation = "messages"
    x_api_key = True

    def __init__(self, headers: dict[str, str] | None = None) -> None:
        self.forwarded_headers = headers or {}

    def parse(self, raw: bytes) -> MessagesCall:
        call = MessagesCall.read(raw, self.forwarded_headers)
        note_request(call.body)  # the span's sampling parameters
        return call

    async def prepare(self, services: Services, key: KeyInfo, call: MessagesCall) -> None:
        """The hosted tools the gateway runs for the request (``mcp_servers``, stand-ins)."""
        await hosted_tools.prepare(call, services.hosted, key, "")

    def cacheable(self, call: MessagesCall) -> bool:
        return call.hosted is None  # a hosted loop's answer depends on its tools' results

    def request(self, call: MessagesCall) -> ChatCompletionRequest:
        return call.routed()

    def facts(self, call: MessagesCall) -> RequestFacts:
        facts = RequestFacts.of_chat(call.routed())
        return replace(facts, server_tools=call.body.server_tools())

    def field_names(self, call: MessagesCall) -> FieldNames | None:
        return call.names

    async def whole(self, backend: Backend, call: MessagesCall, model: str) -> Answered:
        native = native_messages(backend)
        if native is not None:  # the upstream's own answer, naming its own model
            call.dropped, call.clamped = [], None
            content, usage = await native.messages(call.native(), call.headers)
            return NativeMessage(content, usage)
        request = _translated(backend, call, model)
        if call.hosted is not None:
            return await hosted_tools.answer(backend, call, request)
        return await backend.chat(request)

    def stream(self, backend: Backend, call: MessagesCall, model: str) -> FrameStream:
        native = native_messages(backend)
        if native is not None:
            call.dropped, call.clamped = [], None
            return native.messages_stream(call.native(), call.headers)
        request = _translated(backend, call, model)
        if call.hosted is not None:
            return HostedMessageEvents(call, backend, request)
        return MessageEvents(backend.chat_stream(request), model)

    def session_hint(self, call: MessagesCall) -> SessionHint | None:
        """Claude Code's session, from ``metadata.user_id``."""
        metadata = call.body.metadata or {}
        user_id = metadata.get("user_id")
        found = claude_session(user_id if isinstance(user_id, str) else None)
        return None if found is None else SessionHint("metadata.user_id", found)

    def answer_headers(self, call: MessagesCall) -> dict[str, str]:
        headers = {"x-shunter-dropped": ",".join(call.dropped)} if call.dropped else {}
        if call.clamped is not None:
            headers["x-shunter-clamped"] = f"max_tokens={call.clamped}"
        return headers

    async def render(self, call: MessagesCall, answer: Answered) -> bytes:
        if isinstance(answer, NativeMessage):
            return answer.body
        said = message_answer(answer)
        if call.hosted is not None:
            said.content = [*call.leading, *said.content]
            said.stop_reason = call.stopped or said.stop_reason  # type: ignore[assignment]
        return said.model_dump_json().encode()

    async def replay(self, call: MessagesCall, hit: ChatCompletion) -> AsyncIterator[bytes]:
        for frame in await MessageEvents(replay(chat_chunks(hit)), hit.model).drain():
            yield frame

    def end(self, call: MessagesCall, stream: ServedStream, failure: GatewayError | None) -> bytes:
        if failure is None:
            return b""
        status = anthropic_status(failure.status_code)
        return sse("error", error_body(status, error_message(failure)))


def _translated(backend: Backend, call: MessagesCall, model: str) -> ChatCompletionRequest:
    """The chat request ``backend`` gets, whose answers say ``model``; a request it cannot
    take is the client's fault (a 400 naming the field), not the deployment's. A
    deployment that clamps output budgets gets one that fits its context, by routing's
    own estimate."""
    caps = backend.capabilities
    try:
        chat = answered_by(call.chat(caps.messages_drop, files=caps.reads("file")), model)
    except InvalidRequestError as exc:
        exc.counts_as_failure = False
        exc.param_named = True  # the translation names the field of the request as sent
        raise
    call.clamped = None
    if caps.clamp_output and caps.context_length is not None and chat.max_tokens:
        room = max(1, caps.context_length - describe_request(chat).prompt_tokens)
        if chat.max_tokens > room:
            chat.max_tokens = call.clamped = room
    return chat


def forwarded(scope: Scope) -> dict[str, str]:
    """The client's headers that a Messages upstream gets (``anthropic-beta``)."""
    wanted = {name.encode("latin-1") for name in FORWARDED_HEADERS}
    return {
        name.decode("latin-1"): value.decode("latin-1")
        for name, value in scope.get("headers", ())
        if name.lower() in wanted
    }


@asgi("/v1/messages", copy_scope=False)
async def messages(scope: Scope, receive: Receive, send: Send) -> None:
    await handle(scope, receive, send, MessagesEndpoint(forwarded(scope)))


@asgi("/v1/messages/count_tokens", copy_scope=False)
async def messages_count_tokens(scope: Scope, receive: Receive, send: Send) -> None:
    """``POST /v1/messages/count_tokens``: admitted as any request is (the key, its model
    scope and its request rate; the prompt's tokens are given back after: nothing is
    generated). Exact where the model's first deployment can count (a local engine with
    its chat template, or an Anthropic upstream's own count, which gets the body as sent);
    estimated elsewhere. ``x-shunter-token-count`` says which: ``exact``, ``upstream`` or
    ``estimated``."""
    if scope.get("method") != "POST":
        raise MethodNotAllowedException(headers={"allow": "POST"})
    state = scope["app"].state
    gateway = taking_work(state.gateway)
    services: Services = state.services
    key = await services.admission.authenticate(credentials(scope, x_api_key=True))
    raw = await read_body(scope, receive)
    call = MessagesCall.read(raw, forwarded(scope), CountTokensRequest)
    note_request(call.body)
    request_facts(scope).update(key_id=key.id, model=call.model)
    estimate = RequestFacts.of_chat(call.routed())
    ticket = await services.admission.admit(replace(estimate, max_output_tokens=0), key)
    try:
        tokens, how = await _count_tokens(gateway.first_choice(call.model), call, estimate)
    except GatewayError as exc:
        if call.names is not None:  # counted on the chat request: named as sent
            call.names.rename(exc)
        raise
    finally:
        await services.admission.settle(ticket, None)  # counts as a request, spends nothing
    answer = JSONBody(_json({"input_tokens": tokens}), {"x-shunter-token-count": how})
    await answer(scope, receive, send)


async def _count_tokens(
    backend: Backend, call: MessagesCall, estimate: RequestFacts
) -> tuple[int, str]:
    """The prompt tokens of ``call`` and how they were counted."""
    native, counter = native_messages(backend), token_counter(backend)
    if native is not None:
        return await native.count_message_tokens(call.native(count=True), call.headers), "upstream"
    if counter is not None:
        return await counter.count_tokens(call.routed()), "exact"
    return estimate.prompt_tokens, "estimated"


MESSAGE_ROUTES = [messages, messages_count_tokens]


def anthropic_error(
    status: int, message: str, request_id: str | None
) -> tuple[int, dict[str, Any]]:
    """An error on the Messages routes, in Anthropic's shape and with its status."""
    status = anthropic_status(status)
    return status, error_body(status, message, request_id)


def _json(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()
