"""``/v1/responses``: OpenAI's Responses API on the shared request path.

A request is translated to the gateway's chat request (:mod:`gateway.ingress.responses`),
so every backend serves it, and the chat answer (or chunk stream) back into a response
(or its events). A finished response is stored for ``previous_response_id`` and for
``GET`` / ``DELETE /v1/responses/{id}`` and ``GET /v1/responses/{id}/input_items``,
readable only with the key that created it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from litestar import Request, asgi, delete, get
from litestar.enums import ScopeType
from litestar.params import FromPath
from litestar.types import ASGIApp, Receive, Scope, Send

from backends.base import Backend
from gateway.admission.admit import RequestFacts
from gateway.admission.cache import chat_chunks, replay
from gateway.admission.keys import KeyInfo
from gateway.admission.sessions import SessionHint, SessionId
from gateway.dispatch import ServedStream
from gateway.errors import GatewayError
from gateway.hosted import responses as hosted_tools
from gateway.hosted.response_stream import HostedResponseEvents
from gateway.http.asgi import JSONBody
from gateway.http.endpoint import Endpoint, answered_by
from gateway.http.intake import MAX_BODY_BYTES, Services, json_response, parse_body
from gateway.http.responses_socket import serve_socket
from gateway.http.serving import handle
from gateway.ingress.response_events import ResponseEvents
from gateway.ingress.response_history import input_items, new_items, output_messages
from gateway.ingress.response_input import input_messages
from gateway.ingress.response_tools import tool_map
from gateway.ingress.responses import (
    ResponsesCall,
    completed,
    dump_messages,
    refuse_unserved,
    to_chat,
)
from gateway.ingress.translate import sse
from gateway.protocol import ChatCompletion, ChatCompletionRequest
from gateway.protocol.fieldnames import FieldNames
from gateway.protocol.responses import (
    InputItem,
    InputItemList,
    ResponseObject,
    ResponsesRequest,
)
from gateway.protocol.sse import DONE


class ResponsesEndpoint(Endpoint[ResponsesCall, ChatCompletion]):
    operation = "responses"

    def parse(self, raw: bytes) -> ResponsesCall:
        body = parse_body(ResponsesRequest, raw)
        refuse_unserved(body)
        return ResponsesCall(
            body, owner="", response_id=f"resp_{uuid.uuid4().hex}", body_bytes=len(raw)
        )

    async def prepare(self, services: Services, key: KeyInfo, call: ResponsesCall) -> None:
        """The caller's stored conversation (``previous_response_id``), then the chat
        request."""
        call.owner = key.id
        call.store, call.conversations = services.responses, services.conversations
        body = call.body
        hosted = services.hosted
        served = hosted.served()  # the tool types the gateway runs itself
        call.tools = tool_map(body.tools, body.input, services.hosted_for(body.model), served)
        room = MAX_BODY_BYTES - call.body_bytes  # history and input together: one body's cap
        if body.previous_response_id and not call.resumed:
            record = await services.responses.load(
                body.previous_response_id, key.id, param="previous_response_id", max_bytes=room
            )
            call.history = record["messages"]
            session = record.get("session")
            call.session = session if isinstance(session, dict) else None
            call.earlier = record["response"].get("output") or []
        conversation = call.conversation_id
        if conversation is not None and body.previous_response_id is None:
            held = await services.conversations.load(
                conversation, key.id, param="conversation", max_bytes=room
            )
            items = [InputItem.model_validate(item) for item in held["items"]]
            call.history = dump_messages(input_messages(items, call.tools))
        chat_body = await hosted_tools.prepare(call, hosted, key, call.response_id)
        call.chat, call.turn, call.names = to_chat(chat_body, call.history, call.tools)

    def cacheable(self, call: ResponsesCall) -> bool:
        return call.hosted is None  # a hosted loop's answer depends on its tools' results

    def session_hint(self, call: ResponsesCall) -> SessionHint | None:
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

    def note_session(self, call: ResponsesCall, session: SessionId) -> None:
        call.session = {"id": session.id, "label": session.label}

    def answer_headers(self, call: ResponsesCall) -> dict[str, str]:
        """``x-shunter-dropped``: the hosted tools left out of the request, if any."""
        dropped = call.tools.dropped
        return {"x-shunter-dropped": ", ".join(dropped)} if dropped else {}

    def request(self, call: ResponsesCall) -> ChatCompletionRequest:
        return call.chat_request()

    def facts(self, call: ResponsesCall) -> RequestFacts:
        return RequestFacts.of_chat(call.chat_request())

    def field_names(self, call: ResponsesCall) -> FieldNames | None:
        return call.names

    async def whole(self, backend: Backend, call: ResponsesCall, model: str) -> ChatCompletion:
        request = answered_by(call.chat_request(), model)
        if call.hosted is not None:
            return await hosted_tools.answer(backend, call, request)
        return await backend.chat(request)

    def stream(self, backend: Backend, call: ResponsesCall, model: str) -> ResponseEvents:
        request = answered_by(call.chat_request(), model)
        if call.hosted is not None:
            events: ResponseEvents = HostedResponseEvents(call, backend, request, _saver(call))
        else:
            events = ResponseEvents(call, backend.chat_stream(request), _saver(call))
        call.streams[backend.name] = events
        return events

    async def render(self, call: ResponsesCall, answer: ChatCompletion) -> bytes:
        response = completed(call, answer)
        data = response.model_dump_json()
        if not await _save(call, response, data):
            data = response.model_dump_json()  # now saying store: false
        return data.encode()

    async def replay(self, call: ResponsesCall, hit: ChatCompletion) -> AsyncIterator[bytes]:
        events = ResponseEvents(call, replay(chat_chunks(hit)), _saver(call))
        for frame in await events.drain():
            yield frame
        yield DONE

    def end(self, call: ResponsesCall, stream: ServedStream, failure: GatewayError | None) -> bytes:
        """The stream's last frames: after a failure its ``error`` (and ``response.failed``
        where the events are ours), then the terminal ``data: [DONE]`` that the Open
        Responses specification asks for (OpenAI's SDKs stop reading there)."""
        if failure is None:
            return DONE
        events = call.streams.get(stream.deployment)
        if events is None:  # not one of ours: say it as an error event alone
            error = {"type": "error", "message": failure.message, "sequence_number": 0}
            return sse("error", error) + DONE
        failed: bytes = events.failed(failure)
        return failed + DONE


RESPONSES = ResponsesEndpoint()


@asgi("/v1/responses", copy_scope=False)
async def responses(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == ScopeType.WEBSOCKET:
        await serve_socket(scope, receive, send, RESPONSES)
        return
    await handle(scope, receive, send, RESPONSES)


@get("/v1/responses/{response_id:str}")
async def retrieve_response(request: Request[Any, Any, Any], response_id: FromPath[str]) -> ASGIApp:
    """A stored response, for the key that created it (404 for any other)."""
    record = await _stored(request, response_id)
    return JSONBody(json.dumps(record["response"]).encode(), {})


@get("/v1/responses/{response_id:str}/input_items")
async def response_input_items(
    request: Request[Any, Any, Any], response_id: FromPath[str]
) -> ASGIApp:
    """The input items of a stored response, in order (one page)."""
    record = await _stored(request, response_id)
    return json_response(input_item_list(record, response_id), {})


@delete("/v1/responses/{response_id:str}", status_code=200)
async def delete_response(request: Request[Any, Any, Any], response_id: FromPath[str]) -> ASGIApp:
    """Delete a stored response (the key that created it only)."""
    services: Services = request.app.state.services
    key = await services.admission.authenticate(request.headers.get("authorization"))
    await services.responses.delete(response_id, key.id)
    body = {"id": response_id, "object": "response.deleted", "deleted": True}
    return JSONBody(json.dumps(body).encode(), {})


RESPONSE_ROUTES = [responses, retrieve_response, response_input_items, delete_response]


async def _stored(request: Request[Any, Any, Any], response_id: str) -> dict[str, Any]:
    """The stored record of ``response_id``, for the caller's key only."""
    services: Services = request.app.state.services
    key = await services.admission.authenticate(request.headers.get("authorization"))
    return await services.responses.load(response_id, key.id)


async def _save(call: ResponsesCall, response: ResponseObject, data: str | None = None) -> bool:
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
        await call.conversations.append(call.conversation_id, call.owner, added)
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
    async def save(response: ResponseObject) -> None:
        await _save(call, response)

    return save


def input_item_list(record: dict[str, Any], response_id: str) -> InputItemList:
    """The stored input of a response as its item list (each item with an id)."""
    given = record.get("input") or ""
    if not isinstance(given, str):
        given = [InputItem.model_validate(item) for item in given]
    items = input_items(given, response_id)
    first = items[0]["id"] if items else ""
    last = items[-1]["id"] if items else ""
    return InputItemList(data=items, first_id=first, last_id=last)
