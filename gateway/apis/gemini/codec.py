"""``POST /v1beta/models/{model}:generateContent`` and ``:streamGenerateContent`` as codecs
of the request spine.

Decode: the model of the path, the body as sent, the stream's framing (``?alt=sse``:
server-sent events; without it, one JSON array). What a deployment is sent is its plan's:
one whose upstream speaks the Gemini API itself (``native_apis``) gets the client's bytes;
every other one the chat translation under its own rules. Encode: the upstream's own
answer as it came, or the chat answer (or chunk stream) as a ``GenerateContentResponse``
(or a stream of them).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from backends.base import Capabilities
from gateway.admission.cache import chat_chunks, replay
from gateway.apis.contract import Decoded, Exchange, Outcome, Reply, query_error
from gateway.apis.gemini.answer import generate_response
from gateway.apis.gemini.errors import error_object
from gateway.apis.gemini.events import Framing, GeminiEvents
from gateway.apis.gemini.translation import NATIVE, GeminiCall
from gateway.dispatch import Native, NativeAnswer, Sending, ServedStream
from gateway.errors import GatewayError, InvalidRequestError
from gateway.protocol import ChatCompletion
from gateway.telemetry.tracing import note_request

EVENTS = "text/event-stream"
JSON = "application/json"
_ALT = frozenset({"sse", "json"})


class Planned:
    """The plan of a Gemini call: the client's bytes where the upstream speaks Gemini,
    else the translation under the deployment's rules."""

    __slots__ = ("call",)

    def __init__(self, call: GeminiCall) -> None:
        self.call = call

    def __call__(self, capabilities: Capabilities, model: str) -> Sending:
        call = self.call
        if NATIVE in capabilities.native_apis:
            return Sending(native=Native(NATIVE, call.native()))
        try:
            done = call.translated(files=capabilities.reads("file"))
        except InvalidRequestError as exc:
            exc.counts_as_failure = False  # the request's fault, not the deployment's
            exc.param_named = True  # the translation names the field as sent
            raise
        chat = done.chat
        if chat.model != model:
            chat = chat.model_copy(update={"model": model})
        return Sending(chat, dropped=tuple(done.dropped), names=done.names)


class GenerateCodec:
    """``generateContent`` (``stream`` false) or ``streamGenerateContent``."""

    def __init__(self, stream: bool) -> None:
        self.stream = stream

    async def decode(self, exchange: Exchange) -> Decoded:
        model = path_model(exchange)
        alt = exchange.query.get("alt", "json")
        if alt not in _ALT:
            raise query_error("alt", alt, "sse or json")
        call = GeminiCall.read(
            exchange.body,
            model,
            stream=self.stream,
            sse=alt == "sse",
            hosted=hosted_setting(exchange, model),
        )
        routed = call.routed()
        note_request(routed)  # the span's sampling parameters
        return Decoded(
            model,
            "generate_content",
            routed,
            Planned(call),
            stream=self.stream,
            form="chunks",
            cached=ChatCompletion,
            names=call.names,
            call=call,
        )

    async def encode(self, decoded: Decoded, outcome: Outcome) -> Reply:
        call: GeminiCall = decoded.call
        headers = outcome.headers | sent_headers(outcome.sending)
        media = EVENTS if call.sse else JSON
        if outcome.stream is not None:
            return Reply(headers=headers, frames=streamed(call, outcome.stream), media_type=media)
        answer = outcome.answer
        if isinstance(answer, NativeAnswer):
            return Reply(answer.body, headers)
        if outcome.cached and decoded.stream:
            return Reply(headers=headers, frames=replayed(call, answer), media_type=media)
        said = generate_response(answer, call.body.include_thoughts())
        return Reply(json.dumps(said, ensure_ascii=False).encode(), headers)


def path_model(exchange: Exchange) -> str:
    """The model named in the path (``models/`` left off), recorded for the access line."""
    model = str(exchange.path_params.get("model_id", "")).lstrip("/").removeprefix("models/")
    if not model:
        raise InvalidRequestError("The path names no model.", param="model")
    exchange.facts["model"] = model
    return model


def hosted_setting(exchange: Exchange, model: str) -> str:
    """What Google's hosted tools get for ``model``: the setting Responses reads for the
    tools only OpenAI runs (``drop`` where that API is not served)."""
    state = exchange.services.apis.get("responses")
    hosted_for = getattr(state, "hosted_for", None)
    return str(hosted_for(model)) if hosted_for is not None else "drop"


def sent_headers(sending: Sending | None) -> dict[str, str]:
    """What the translation for the deployment that answered dropped."""
    if sending is None or not sending.dropped:
        return {}
    return {"x-shunter-dropped": ",".join(sending.dropped)}


async def streamed(call: GeminiCall, stream: ServedStream) -> AsyncIterator[bytes]:
    """The stream: the upstream's own as it came (framed as the client asked), or the
    translation's; after a failure nothing could continue, an ``error`` object."""
    framing = Framing(call.sse)
    try:
        sending = stream.sending
        if sending is not None and sending.native is not None:
            async for frame in native_frames(stream.pieces(), framing):
                yield frame
            return
        events = GeminiEvents(stream.pieces(), call.model, framing, call.body.include_thoughts())
        async for frame in events:
            if call.sse or not frame.startswith(b":"):  # a resume's SSE comment
                yield frame
    except GatewayError as failure:
        if call.names is not None:
            call.names.rename(failure)
        yield framing.frame({"error": error_object(failure, failure.status_code)})
        yield framing.end()


async def native_frames(pieces: AsyncIterator[bytes], framing: Framing) -> AsyncIterator[bytes]:
    """A Gemini upstream's server-sent events, as they came, or (without ``alt=sse``) as
    the elements of a JSON array."""
    if framing.sse:
        async for piece in pieces:
            yield piece
        return
    held = b""
    async for piece in pieces:
        held += piece.replace(b"\r\n", b"\n")
        *events, held = held.split(b"\n\n")
        for event in events:
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    yield framing.frame(json.loads(line[5:]))
    yield framing.end()


async def replayed(call: GeminiCall, hit: ChatCompletion) -> AsyncIterator[bytes]:
    """A cache hit as a stream."""
    events = GeminiEvents(
        replay(chat_chunks(hit)), hit.model, Framing(call.sse), call.body.include_thoughts()
    )
    for frame in await events.drain():
        yield frame
