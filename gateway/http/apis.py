"""The Responses and Messages APIs on the shared request path.

``POST /v1/responses`` and ``POST /v1/messages`` are :class:`~gateway.http.serving.Endpoint`
s: the same authentication, admission, cache, routing, fallback, in-band errors, client
watch and headers as chat. Each translates to the gateway's chat request
(:mod:`gateway.ingress`), so every backend serves them; a Messages request routed to a
backend that speaks Messages itself (``anthropic``) is passed through untouched.

Besides, the stored responses (``GET`` / ``DELETE /v1/responses/{id}``, ``GET
/v1/responses/{id}/input_items``, readable only with the key that created them) and
``POST /v1/messages/count_tokens``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from litestar.types import Receive, Scope, Send

from backends.base import Backend
from gateway.admission.admit import RequestFacts
from gateway.admission.cache import chat_chunks, replay
from gateway.admission.keys import KeyInfo, check_model
from gateway.dispatch.router import OpenedStream
from gateway.errors import GatewayError
from gateway.http.asgi import JSONBody
from gateway.http.serving import (
    Endpoint,
    Services,
    credentials,
    parse_body,
    read_body,
    request_facts,
    taking_work,
)
from gateway.ingress.message_events import MessageEvents
from gateway.ingress.messages import (
    MessagesBackend,
    MessagesCall,
    NativeMessage,
    TokenCounter,
    message_answer,
    to_chat,
)
from gateway.ingress.response_events import ResponseEvents
from gateway.ingress.responses import (
    ResponsesCall,
    completed,
    dump_messages,
    input_items,
    output_messages,
)
from gateway.ingress.responses import to_chat as responses_to_chat
from gateway.ingress.translate import sse
from gateway.protocol import ChatCompletion
from gateway.protocol.messages import (
    CountTokensRequest,
    MessagesRequest,
    anthropic_status,
    error_body,
)
from gateway.protocol.responses import (
    InputItem,
    InputItemList,
    ResponseObject,
    ResponsesRequest,
)


def _json(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()


# --- /v1/responses ----------------------------------------------------------------------


async def _prepare_responses(services: Services, key: KeyInfo, call: ResponsesCall) -> None:
    """The caller's stored conversation (``previous_response_id``), then the chat request."""
    call.owner = key.id
    call.store = services.responses
    body = call.body
    if body.previous_response_id:
        record = await services.responses.load(
            body.previous_response_id, key.id, param="previous_response_id"
        )
        call.history = record["messages"]
    call.chat, call.turn = responses_to_chat(body, call.history)


async def _save(call: ResponsesCall, response: ResponseObject, data: str | None = None) -> bool:
    """Keep a finished response for ``previous_response_id`` and ``GET`` (``store``); False
    when it was to be stored and could not be (its ``store`` then says so). ``data``: the
    response's JSON, when it is at hand (it goes into the record as it is)."""
    body, store = call.body, call.store
    if body.store is False or store is None:
        return True
    given: Any = body.input
    if not isinstance(given, str):
        given = [item.model_dump(mode="json", exclude_none=True) for item in given]
    messages = [*call.history, *dump_messages(call.turn), *output_messages(response.output)]
    owner, inputs = json.dumps(call.owner), json.dumps(given, ensure_ascii=False)
    said = data if data is not None else response.model_dump_json()
    turns = json.dumps(messages, ensure_ascii=False)
    record = f'{{"owner":{owner},"response":{said},"input":{inputs},"messages":{turns}}}'
    if await store.save(call.response_id, record):
        return True
    response.store = False
    return False


def _responses_call(raw: bytes) -> ResponsesCall:
    body = parse_body(ResponsesRequest, raw)
    return ResponsesCall(body, owner="", response_id=f"resp_{uuid.uuid4().hex}")


async def _render_response(call: ResponsesCall, answer: ChatCompletion) -> bytes:
    response = completed(call, answer)
    data = response.model_dump_json()
    if not await _save(call, response, data):
        data = response.model_dump_json()  # now saying store: false
    return data.encode()


def _response_events(backend: Backend, call: ResponsesCall) -> ResponseEvents:
    events = ResponseEvents(call, backend.chat_stream(call.chat_request()), _saver(call))
    call.streams[backend.name] = events
    return events


def _saver(call: ResponsesCall) -> Any:
    async def save(response: ResponseObject) -> None:
        await _save(call, response)

    return save


async def _replay_response(call: ResponsesCall, hit: ChatCompletion) -> AsyncIterator[bytes]:
    events = ResponseEvents(call, replay(chat_chunks(hit)), _saver(call))
    for frame in await events.drain():
        yield frame


def _end_response(call: ResponsesCall, opened: OpenedStream, failure: GatewayError | None) -> bytes:
    if failure is None:
        return b""
    events = call.streams.get(opened.candidate.settings.name)
    if events is None:  # not one of ours: say it as an error event alone
        return sse("error", {"type": "error", "message": failure.message, "sequence_number": 0})
    failed: bytes = events.failed(failure)
    return failed


RESPONSES: Endpoint[ResponsesCall, ChatCompletion] = Endpoint(
    "responses",
    _responses_call,
    lambda call: RequestFacts.of_chat(call.chat_request()),
    lambda call: call.chat_request(),
    lambda backend, call: backend.chat(call.chat_request()),
    _response_events,
    ChatCompletion,
    _replay_response,
    _end_response,
    _render_response,
    prepare=_prepare_responses,
)

# --- /v1/messages -----------------------------------------------------------------------


def _messages_call(raw: bytes) -> MessagesCall:
    body = parse_body(MessagesRequest, raw)
    return MessagesCall(body, to_chat(body))


async def _message_whole(backend: Backend, call: MessagesCall) -> ChatCompletion | NativeMessage:
    if isinstance(backend, MessagesBackend):
        content, usage = await backend.messages(call.native(stream=False))
        return NativeMessage(content, usage)
    return await backend.chat(call.chat)


async def _render_message(call: MessagesCall, answer: ChatCompletion | NativeMessage) -> bytes:
    if isinstance(answer, NativeMessage):
        return answer.body
    return message_answer(answer).model_dump_json().encode()


def _message_stream(backend: Backend, call: MessagesCall) -> Any:
    if isinstance(backend, MessagesBackend):
        return backend.messages_stream(call.native(stream=True))
    return MessageEvents(backend.chat_stream(call.chat), call.model)


async def _replay_message(call: MessagesCall, hit: ChatCompletion) -> AsyncIterator[bytes]:
    for frame in await MessageEvents(replay(chat_chunks(hit)), call.model).drain():
        yield frame


def _end_message(call: MessagesCall, opened: OpenedStream, failure: GatewayError | None) -> bytes:
    if failure is None:
        return b""
    return sse("error", error_body(anthropic_status(failure.status_code), failure.message))


MESSAGES: Endpoint[MessagesCall, ChatCompletion | NativeMessage] = Endpoint(
    "messages",
    _messages_call,
    lambda call: RequestFacts.of_chat(call.chat),
    lambda call: call.chat,
    _message_whole,
    _message_stream,
    ChatCompletion,
    _replay_message,
    _end_message,
    _render_message,
    x_api_key=True,
)


async def count_tokens(scope: Scope, receive: Receive, send: Send) -> None:
    """``POST /v1/messages/count_tokens``: the key and its model scope are checked (no
    limits are taken: nothing is generated). Exact where the model's first deployment can
    count (a local engine with its chat template, or an Anthropic upstream's own count);
    estimated elsewhere. ``x-shunter-token-count`` says which: ``exact``, ``upstream`` or
    ``estimated``."""
    if scope.get("method") != "POST":
        from litestar.exceptions import MethodNotAllowedException

        raise MethodNotAllowedException(headers={"allow": "POST"})
    state = scope["app"].state
    gateway = taking_work(state.gateway)
    services: Services = state.services
    key = await services.admission.authenticate(credentials(scope, x_api_key=True))
    body = parse_body(CountTokensRequest, await read_body(scope, receive))
    request_facts(scope).update(key_id=key.id, model=body.model)
    check_model(key, body.model)
    backend = gateway.decide(body.model).candidates[0].backend
    call = MessagesCall(body, to_chat(body, stream=False))
    if isinstance(backend, MessagesBackend):
        native = call.native(stream=False)
        native.pop("max_tokens", None)
        tokens, how = await backend.count_message_tokens(native), "upstream"
    elif isinstance(backend, TokenCounter):
        tokens, how = await backend.count_tokens(call.chat), "exact"
    else:
        tokens, how = RequestFacts.of_chat(call.chat).prompt_tokens, "estimated"
    answer = JSONBody(_json({"input_tokens": tokens}), {"x-shunter-token-count": how})
    await answer(scope, receive, send)


# --- stored responses -------------------------------------------------------------------


async def stored(services: Services, authorization: str | None, response_id: str) -> dict[str, Any]:
    """The stored record of ``response_id``, for the key in ``authorization`` only."""
    key = await services.admission.authenticate(authorization)
    return await services.responses.load(response_id, key.id)


def input_item_list(record: dict[str, Any], response_id: str) -> InputItemList:
    """The stored input of a response as its item list (each item with an id)."""
    given = record.get("input") or ""
    if not isinstance(given, str):
        given = [InputItem.model_validate(item) for item in given]
    items = input_items(given, response_id)
    first = items[0]["id"] if items else ""
    last = items[-1]["id"] if items else ""
    return InputItemList(data=items, first_id=first, last_id=last)


def anthropic_error(
    status: int, message: str, request_id: str | None
) -> tuple[int, dict[str, Any]]:
    """An error on the Messages routes, in Anthropic's shape and with its status."""
    status = anthropic_status(status)
    return status, error_body(status, message, request_id)
