"""``POST /v1/responses``: OpenAI's Responses API as a codec of the request spine.

Decode: the request, then what it continues (the stored response of
``previous_response_id``, or the items of its ``conversation``), the hosted tools the
gateway runs for it, and its chat translation, which every deployment is sent. Encode: the
chat answer as a response object (stored for ``previous_response_id`` and ``GET``), or the
chat chunk stream as Responses events, written above the stream's survival (a resumed
stream goes on in the same events).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from backends.base import Capabilities
from gateway.admission.cache import chat_chunks, replay
from gateway.admission.sessions import SessionHint
from gateway.apis.contract import MAX_BODY_BYTES, Decoded, Exchange, Outcome, Reply, parse_body
from gateway.apis.responses import hosted as hosted_tools
from gateway.apis.responses.events import ResponseEvents
from gateway.apis.responses.history import new_items, output_messages
from gateway.apis.responses.hosted_events import HostedResponseEvents
from gateway.apis.responses.input import input_messages
from gateway.apis.responses.state import ResponsesState
from gateway.apis.responses.tools import tool_map
from gateway.apis.responses.translation import (
    ResponsesCall,
    completed,
    dump_messages,
    refuse_unserved,
    to_chat,
)
from gateway.dispatch import Sending, ServedStream
from gateway.errors import GatewayError
from gateway.protocol import ChatCompletion
from gateway.protocol.responses import InputItem, ResponseObject, ResponsesRequest
from gateway.protocol.sse import DONE
from gateway.protocol.translate import sse


class Translated:
    """The plan of a Responses call: every deployment is sent its chat translation."""

    __slots__ = ("call",)

    def __init__(self, call: ResponsesCall) -> None:
        self.call = call

    def __call__(self, capabilities: Capabilities, model: str) -> Sending:
        chat = self.call.chat_request()
        if chat.model != model:
            chat = chat.model_copy(update={"model": model})
        return Sending(chat, names=self.call.names)


class ResponsesCodec:
    """Responses over HTTP (and, through :mod:`gateway.apis.responses.socket`, over a
    WebSocket)."""

    async def decode(self, exchange: Exchange) -> Decoded:
        call = read(exchange.body)
        await prepare(exchange, call)
        return decoded_of(call)

    async def encode(self, decoded: Decoded, outcome: Outcome) -> Reply:
        return await encode(decoded.call, decoded.stream, outcome)


def read(raw: bytes, **update: Any) -> ResponsesCall:
    """The call of a request body (a 400 naming the field when it is not a request)."""
    body = parse_body(ResponsesRequest, raw)
    if update:
        body = body.model_copy(update=update)
    refuse_unserved(body)
    return ResponsesCall(
        body, owner="", response_id=f"resp_{uuid.uuid4().hex}", body_bytes=len(raw)
    )


async def prepare(exchange: Exchange, call: ResponsesCall) -> None:
    """The caller's stored conversation (``previous_response_id`` or ``conversation``),
    the hosted tools, then the chat request."""
    state: ResponsesState = exchange.services.of("responses")
    key = exchange.key
    call.owner = key.id
    call.store, call.conversations = state.responses, state.conversations
    body = call.body
    hosted = exchange.services.hosted
    served = hosted.served()  # the tool types the gateway runs itself
    call.tools = tool_map(body.tools, body.input, state.hosted_for(body.model), served)
    room = MAX_BODY_BYTES - call.body_bytes  # history and input together: one body's cap
    if body.previous_response_id and not call.resumed:
        record = await state.responses.load(
            body.previous_response_id, key.id, param="previous_response_id", max_bytes=room
        )
        call.history = record["messages"]
        session = record.get("session")
        call.session = session if isinstance(session, dict) else None
        call.earlier = record["response"].get("output") or []
    conversation = call.conversation_id
    if conversation is not None and body.previous_response_id is None:
        held = await state.conversations.load(
            conversation, key.id, param="conversation", max_bytes=room
        )
        items = [InputItem.model_validate(item) for item in held["items"]]
        call.history = dump_messages(input_messages(items, call.tools))
    chat_body = await hosted_tools.prepare(call, hosted, key, call.response_id)
    call.chat, call.turn, call.names = to_chat(
        chat_body, call.history, call.tools, empty_ok=not call.generate
    )


def decoded_of(call: ResponsesCall) -> Decoded:
    """The spine's view of a prepared call."""
    return Decoded(
        call.model,
        "responses",
        call.chat_request(),
        Translated(call),
        stream=call.stream,
        form="chunks",
        hosted=call.hosted,
        session_hint=session_hint(call),
        cached=ChatCompletion if call.hosted is None else None,
        names=call.names,
        call=call,
    )


def session_hint(call: ResponsesCall) -> SessionHint | None:
    """``prompt_cache_key``, else the session of the response ``previous_response_id``
    continues, else the ``conversation``."""
    body = call.body
    if body.prompt_cache_key:
        return SessionHint("prompt_cache_key", body.prompt_cache_key)
    stored = call.session
    if stored is not None and stored.get("id") and stored.get("label"):
        return SessionHint("previous_response_id", stored["label"], resolved=stored["id"])
    if call.conversation_id is not None:
        return SessionHint("conversation", call.conversation_id)
    return None


async def encode(call: ResponsesCall, stream: bool, outcome: Outcome) -> Reply:
    """The reply to a call: its response (stored, with the session it was admitted in),
    or its events."""
    if outcome.session is not None:
        call.session = {"id": outcome.session.id, "label": outcome.session.label}
    headers = outcome.headers | dropped_header(call)
    if outcome.stream is not None:
        return Reply(headers=headers, frames=events(call, outcome.stream))
    answer: ChatCompletion = outcome.answer
    if outcome.cached and stream:
        return Reply(headers=headers, frames=replayed(call, answer))
    if call.hosted is not None:
        hosted_tools.lead(call)
    return Reply(await render(call, answer), headers)


def dropped_header(call: ResponsesCall) -> dict[str, str]:
    """``x-shunter-dropped``: the hosted tools left out of the request, if any."""
    dropped = call.tools.dropped
    return {"x-shunter-dropped": ", ".join(dropped)} if dropped else {}


async def render(call: ResponsesCall, answer: ChatCompletion) -> bytes:
    """A whole answer as the stored response's JSON."""
    response = completed(call, answer)
    data = response.model_dump_json()
    if not await save(call, response, data):
        data = response.model_dump_json()  # now saying store: false
    return data.encode()


async def events(call: ResponsesCall, stream: ServedStream) -> AsyncIterator[bytes]:
    """The stream's Responses events; after a failure nothing could continue, its
    ``error`` and ``response.failed``; then the terminal ``data: [DONE]`` that the Open
    Responses specification asks for (OpenAI's SDKs stop reading there)."""
    translator: ResponseEvents
    if call.hosted is not None:
        translator = HostedResponseEvents(call, stream.pieces(), _saver(call))
    else:
        translator = ResponseEvents(call, stream.pieces(), _saver(call))
    try:
        async for frame in translator:
            yield frame
    except GatewayError as failure:
        if call.names is not None:
            call.names.rename(failure)
        yield translator.failed(failure) + DONE
        return
    yield DONE


async def replayed(call: ResponsesCall, hit: ChatCompletion) -> AsyncIterator[bytes]:
    """A cache hit as the events of a stream."""
    translator = ResponseEvents(call, replay(chat_chunks(hit)), _saver(call))
    for frame in await translator.drain():
        yield frame
    yield DONE


def error_event(failure: GatewayError) -> bytes:
    """A failure said as a bare ``error`` event (no response was started)."""
    error = {"type": "error", "message": failure.message, "sequence_number": 0}
    return sse("error", error)


async def save(call: ResponsesCall, response: ResponseObject, data: str | None = None) -> bool:
    """Keep a finished response for ``previous_response_id`` and ``GET`` (``store``); False
    when it was to be stored and could not be (its ``store`` then says so). ``data``: the
    response's JSON, when it is at hand (it goes into the record as it is)."""
    body, store = call.body, call.store
    messages = [
        *call.history,
        *dump_messages(call.turn),
        *output_messages(response.output, call.tools),
    ]
    call.transcript = messages
    call.produced = [item.model_dump(mode="json") for item in response.output]
    if call.conversation_id is not None and call.conversations is not None:
        added = [*new_items(body.input), *(i.model_dump(mode="json") for i in response.output)]
        await call.conversations.append(call.conversation_id, call.owner, added, "conversation")
    if body.store is False or store is None:
        return True
    given: Any = body.input
    if not isinstance(given, str):
        given = [item.model_dump(mode="json", exclude_none=True) for item in given]
    owner, inputs = json.dumps(call.owner), json.dumps(given, ensure_ascii=False)
    said = data if data is not None else response.model_dump_json()
    turns = json.dumps(messages, ensure_ascii=False)
    session = json.dumps(call.session, ensure_ascii=False)
    record = (
        f'{{"owner":{owner},"response":{said},"input":{inputs},"messages":{turns},'
        f'"session":{session}}}'
    )
    if await store.save(call.response_id, record):
        return True
    response.store = False
    return False


def _saver(call: ResponsesCall) -> Any:
    async def saved(response: ResponseObject) -> None:
        await save(call, response)

    return saved
