"""``POST /v1/messages``: Anthropic's Messages API as a codec of the request spine.

Decode: the request as sent, and the hosted tools the gateway runs for it. What a
deployment is sent is its plan's: a deployment whose upstream speaks Messages itself
(``native_apis``) gets the client's bytes (``model`` changed) and its ``anthropic-beta``;
every other one the chat translation under its own rules (what it drops, whether it reads
files, an output budget clamped to its context). Encode: the upstream's own answer as it
came, or the chat answer (or chunk stream) as a ``message`` (or its events).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from backends.base import Capabilities
from gateway.admission.cache import chat_chunks, replay
from gateway.admission.sessions import SessionHint, claude_session
from gateway.apis.anthropic import hosted as hosted_tools
from gateway.apis.anthropic.answer import message_answer
from gateway.apis.anthropic.events import MessageEvents
from gateway.apis.anthropic.hosted_events import HostedMessageEvents
from gateway.apis.anthropic.translation import FORWARDED_HEADERS, MessagesCall
from gateway.apis.contract import Decoded, Exchange, Outcome, Reply
from gateway.dispatch import Native, NativeAnswer, Sending, ServedStream, describe_request
from gateway.errors import GatewayError, InvalidRequestError
from gateway.protocol import ChatCompletion
from gateway.protocol.messages import anthropic_status, error_body, error_message
from gateway.protocol.translate import sse
from gateway.telemetry.tracing import note_request

NATIVE = "messages"
MAX_FORWARDED = 4096  # characters of one forwarded header (a list of short beta names)


class Planned:
    """The plan of a Messages call: the client's bytes where the upstream speaks Messages,
    else the translation under the deployment's rules."""

    __slots__ = ("call",)

    def __init__(self, call: MessagesCall) -> None:
        self.call = call

    def __call__(self, capabilities: Capabilities, model: str) -> Sending:
        call = self.call
        if NATIVE in capabilities.native_apis:  # it runs a connector of mcp_servers itself
            return Sending(native=Native(NATIVE, call.native(), call.headers))
        try:
            done = call.translated(capabilities.messages_drop, files=capabilities.reads("file"))
        except InvalidRequestError as exc:
            exc.counts_as_failure = False  # the request's fault, not the deployment's
            exc.param_named = True  # the translation names the field as sent
            raise
        chat = done.chat
        if chat.model != model:
            chat = chat.model_copy(update={"model": model})
        clamped = None
        room = capabilities.context_length
        if capabilities.clamp_output and room is not None and chat.max_tokens:
            room = max(1, room - describe_request(chat, prefixes=False).prompt_tokens)
            if chat.max_tokens > room:
                chat.max_tokens = clamped = room
        return Sending(chat, dropped=tuple(done.dropped), clamped=clamped, names=done.names)


class MessagesCodec:
    """Messages, whole and streamed."""

    async def decode(self, exchange: Exchange) -> Decoded:
        call = MessagesCall.read(exchange.body, forwarded(exchange))
        note_request(call.body)  # the span's sampling parameters
        await hosted_tools.prepare(call, exchange.services.hosted, exchange.key, "")
        routed = call.routed()
        return Decoded(
            call.model,
            "messages",
            routed,
            Planned(call),
            stream=call.stream,
            form="chunks",
            hosted=call.hosted,
            session_hint=session_hint(call),
            cached=ChatCompletion if call.hosted is None else None,
            names=call.names,
            server_tools=call.body.server_tools(),
            call=call,
        )

    async def encode(self, decoded: Decoded, outcome: Outcome) -> Reply:
        call: MessagesCall = decoded.call
        headers = outcome.headers | sent_headers(outcome.sending)
        if outcome.stream is not None:
            return Reply(headers=headers, frames=events(call, outcome.stream))
        answer = outcome.answer
        if isinstance(answer, NativeAnswer):
            return Reply(answer.body, headers)
        if outcome.cached and decoded.stream:
            return Reply(headers=headers, frames=replayed(answer))
        said = message_answer(answer)
        if call.hosted is not None:
            leading, stopped = hosted_tools.lead(call)
            said.content = [*leading, *said.content]
            said.stop_reason = stopped or said.stop_reason  # type: ignore[assignment]
        return Reply(said.model_dump_json().encode(), headers)


def forwarded(exchange: Exchange) -> dict[str, str]:
    """The client's headers that a Messages upstream gets (``anthropic-beta``), each
    bounded (a 400 naming the header past it)."""
    headers = {}
    for name in FORWARDED_HEADERS:
        value = exchange.headers.get(name)
        if value is None:
            continue
        if len(value) > MAX_FORWARDED:
            raise InvalidRequestError(
                f"The {name} header is {len(value)} characters long; at most "
                f"{MAX_FORWARDED} are forwarded.",
                param=name,
            )
        headers[name] = value
    return headers


def session_hint(call: MessagesCall) -> SessionHint | None:
    """Claude Code's session, from ``metadata.user_id``."""
    metadata = call.body.metadata
    found = claude_session(metadata.user_id if metadata is not None else None)
    return None if found is None else SessionHint("metadata.user_id", found)


def sent_headers(sending: Sending | None) -> dict[str, str]:
    """What the translation for the deployment that answered dropped or clamped."""
    if sending is None:
        return {}
    headers = {"x-shunter-dropped": ",".join(sending.dropped)} if sending.dropped else {}
    if sending.clamped is not None:
        headers["x-shunter-clamped"] = f"max_tokens={sending.clamped}"
    return headers


async def events(call: MessagesCall, stream: ServedStream) -> AsyncIterator[bytes]:
    """The stream's events: the upstream's own as they came, or the translation's; after
    a failure nothing could continue, an ``error`` event as Anthropic sends it."""
    try:
        sending = stream.sending
        if sending is not None and sending.native is not None:
            async for frame in stream.pieces():
                yield frame
            return
        translator: MessageEvents
        if call.hosted is not None:
            translator = HostedMessageEvents(call, stream.pieces(), call.model)
        else:
            translator = MessageEvents(stream.pieces(), call.model)
        async for frame in translator:
            yield frame
    except GatewayError as failure:
        if call.names is not None:
            call.names.rename(failure)
        status = anthropic_status(failure.status_code)
        yield sse("error", error_body(status, error_message(failure)))


async def replayed(hit: ChatCompletion) -> AsyncIterator[bytes]:
    """A cache hit as the events of a stream."""
    for frame in await MessageEvents(replay(chat_chunks(hit)), hit.model).drain():
        yield frame
