"""OpenAI's Responses API: ``/v1/responses`` over HTTP and over a WebSocket, its compaction,
its input token count, its stored responses and their input items, and the Conversations
API that responses continue.

A request is translated to the gateway's chat request (:mod:`~.translation`, its input
items in :mod:`~.input`, its tools in :mod:`~.tools`), so every deployment serves it; the
chat answer (or chunk stream) comes back as a response (or its events: :mod:`~.events`).
Errors are OpenAI's; the key comes in ``Authorization: Bearer``, or, on a WebSocket whose
client cannot set headers, in ``?api_key=``.
"""

from __future__ import annotations

from gateway.apis.contract import Api, KeySources, Operation, openai_error
from gateway.apis.responses import conversation_routes as conversations
from gateway.apis.responses.codec import ResponsesCodec
from gateway.apis.responses.compact import CompactCodec
from gateway.apis.responses.input_tokens import input_tokens
from gateway.apis.responses.socket import ResponsesSocket
from gateway.apis.responses.state import ResponsesState
from gateway.apis.responses.stored import (
    delete_response,
    response_input_items,
    retrieve_response,
)

_ONE = "/v1/responses/{response_id:str}"
_CONVERSATION = "/v1/conversations/{conversation_id:str}"
_ITEM = _CONVERSATION + "/items/{item_id:str}"


def api() -> Api:
    return Api(
        name="responses",
        operations=(
            Operation("responses", "/v1/responses", codec=ResponsesCodec(), socket=ResponsesSocket),
            Operation("responses", "/v1/responses/compact", codec=CompactCodec()),
            Operation("responses.input_tokens", "/v1/responses/input_tokens", handler=input_tokens),
            Operation("responses.retrieve", _ONE, ("GET",), handler=retrieve_response),
            Operation("responses.delete", _ONE, ("DELETE",), handler=delete_response),
            Operation(
                "responses.input_items",
                _ONE + "/input_items",
                ("GET",),
                handler=response_input_items,
            ),
            *_conversations(),
        ),
        errors=openai_error,
        keys=KeySources(query=("api_key",)),
        prefixes=("/v1/responses", "/v1/conversations"),
        services=ResponsesState.of,
        reconfigure=ResponsesState.apply,
    )


def _conversations() -> tuple[Operation, ...]:
    return (
        Operation(
            "conversations.create", "/v1/conversations", handler=conversations.create_conversation
        ),
        Operation(
            "conversations.retrieve",
            _CONVERSATION,
            ("GET",),
            handler=conversations.retrieve_conversation,
        ),
        Operation(
            "conversations.update",
            _CONVERSATION,
            ("POST",),
            handler=conversations.update_conversation,
        ),
        Operation(
            "conversations.delete",
            _CONVERSATION,
            ("DELETE",),
            handler=conversations.delete_conversation,
        ),
        Operation(
            "conversations.items",
            _CONVERSATION + "/items",
            ("GET",),
            handler=conversations.list_items,
        ),
        Operation(
            "conversations.items.create",
            _CONVERSATION + "/items",
            ("POST",),
            handler=conversations.create_items,
        ),
        Operation(
            "conversations.items.retrieve", _ITEM, ("GET",), handler=conversations.retrieve_item
        ),
        Operation(
            "conversations.items.delete", _ITEM, ("DELETE",), handler=conversations.delete_item
        ),
    )
