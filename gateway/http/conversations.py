"""``/v1/conversations``: OpenAI's Conversations API on the gateway's state store.

Create, read, update (``metadata``) and delete a conversation; list, add, read and delete
its items. Every route needs the key that created the conversation (another key gets a
404). The conversation of a response (``conversation`` on ``POST /v1/responses``) is the
same record (:mod:`gateway.ingress.conversations`).
"""

from __future__ import annotations

import json
from typing import Any

from litestar import Request, delete, get, post
from litestar.params import FromPath, FromQuery
from litestar.types import ASGIApp

from gateway.admission.keys import KeyInfo
from gateway.errors import InvalidRequestError
from gateway.http.asgi import JSONBody
from gateway.http.intake import Services, parse_body
from gateway.ingress.conversations import (
    ConversationStore,
    conversation_object,
    item_of,
)
from gateway.ingress.response_history import new_items
from gateway.protocol.responses import (
    ConversationCreate,
    ConversationItemsCreate,
    ConversationUpdate,
)

_MAX_LIMIT = 100


async def _caller(request: Request[Any, Any, Any]) -> tuple[ConversationStore, KeyInfo]:
    services: Services = request.app.state.services
    key = await services.admission.authenticate(request.headers.get("authorization"))
    return services.conversations, key


def _json(body: dict[str, Any]) -> ASGIApp:
    return JSONBody(json.dumps(body, ensure_ascii=False).encode(), {})


def _item_list(items: list[dict[str, Any]], has_more: bool = False) -> ASGIApp:
    first = items[0]["id"] if items else None
    last = items[-1]["id"] if items else None
    body = {"object": "list", "data": items, "first_id": first, "last_id": last}
    return _json({**body, "has_more": has_more})


@post("/v1/conversations", status_code=200)
async def create_conversation(request: Request[Any, Any, Any]) -> ASGIApp:
    """A new conversation, with its first items (up to 20) and metadata."""
    store, key = await _caller(request)
    body = parse_body(ConversationCreate, await request.body())
    record = await store.create(key.id, new_items(body.items or []), body.metadata or {})
    return _json(conversation_object(record))


@get("/v1/conversations/{conversation_id:str}")
async def retrieve_conversation(
    request: Request[Any, Any, Any], conversation_id: FromPath[str]
) -> ASGIApp:
    store, key = await _caller(request)
    return _json(conversation_object(await store.load(conversation_id, key.id)))


@post("/v1/conversations/{conversation_id:str}", status_code=200)
async def update_conversation(
    request: Request[Any, Any, Any], conversation_id: FromPath[str]
) -> ASGIApp:
    """Replace the conversation's ``metadata``."""
    store, key = await _caller(request)
    body = parse_body(ConversationUpdate, await request.body())
    record = await store.load(conversation_id, key.id)
    record["metadata"] = body.metadata
    await store.save(record)
    return _json(conversation_object(record))


@delete("/v1/conversations/{conversation_id:str}", status_code=200)
async def delete_conversation(
    request: Request[Any, Any, Any], conversation_id: FromPath[str]
) -> ASGIApp:
    store, key = await _caller(request)
    await store.delete(conversation_id, key.id)
    return _json({"id": conversation_id, "object": "conversation.deleted", "deleted": True})


@get("/v1/conversations/{conversation_id:str}/items")
async def list_items(
    request: Request[Any, Any, Any],
    conversation_id: FromPath[str],
    limit: FromQuery[int] = 20,
    order: FromQuery[str] = "desc",
    after: FromQuery[str | None] = None,
) -> ASGIApp:
    """One page of the items, newest first unless ``order=asc``; ``after`` an item id."""
    store, key = await _caller(request)
    if not 1 <= limit <= _MAX_LIMIT or order not in ("asc", "desc"):
        param = "order" if order not in ("asc", "desc") else "limit"
        raise InvalidRequestError(f"Invalid value for '{param}'.", param=param)
    items = (await store.load(conversation_id, key.id))["items"]
    items = items if order == "asc" else items[::-1]
    if after is not None:
        ids = [item.get("id") for item in items]
        items = items[ids.index(after) + 1 :] if after in ids else []
    return _item_list(items[:limit], has_more=len(items) > limit)


@post("/v1/conversations/{conversation_id:str}/items", status_code=200)
async def create_items(request: Request[Any, Any, Any], conversation_id: FromPath[str]) -> ASGIApp:
    """Add items (up to 20) at the end of the conversation; the added items."""
    store, key = await _caller(request)
    body = parse_body(ConversationItemsCreate, await request.body())
    added = new_items(body.items)
    await store.append(conversation_id, key.id, added)
    return _item_list(added)


@get("/v1/conversations/{conversation_id:str}/items/{item_id:str}")
async def retrieve_item(
    request: Request[Any, Any, Any], conversation_id: FromPath[str], item_id: FromPath[str]
) -> ASGIApp:
    store, key = await _caller(request)
    return _json(item_of(await store.load(conversation_id, key.id), item_id))


@delete("/v1/conversations/{conversation_id:str}/items/{item_id:str}", status_code=200)
async def delete_item(
    request: Request[Any, Any, Any], conversation_id: FromPath[str], item_id: FromPath[str]
) -> ASGIApp:
    """Delete one item; the conversation."""
    store, key = await _caller(request)
    record = await store.load(conversation_id, key.id)
    item_of(record, item_id)
    record["items"] = [item for item in record["items"] if item.get("id") != item_id]
    await store.save(record)
    return _json(conversation_object(record))


CONVERSATION_ROUTES = [
    create_conversation,
    retrieve_conversation,
    update_conversation,
    delete_conversation,
    list_items,
    create_items,
    retrieve_item,
    delete_item,
]
