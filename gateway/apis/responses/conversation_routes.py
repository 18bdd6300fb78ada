"""``/v1/conversations``: OpenAI's Conversations API on the gateway's state store.

Create, read, update (``metadata``) and delete a conversation; list, add, read and delete
its items. Every operation needs the key that created the conversation (another key gets
a 404). The conversation of a response (``conversation`` on ``POST /v1/responses``) is the
same record (:mod:`gateway.apis.responses.conversations`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gateway.apis.contract import Exchange, Reply, parse_body, query_error
from gateway.apis.responses.conversations import ConversationStore, conversation_object, item_of
from gateway.apis.responses.history import new_items
from gateway.apis.responses.input import input_messages
from gateway.apis.responses.state import ResponsesState
from gateway.errors import InvalidRequestError
from gateway.protocol.responses import (
    ConversationCreate,
    ConversationItemsCreate,
    ConversationUpdate,
    InputItem,
)

_MAX_LIMIT = 100


def _store(exchange: Exchange) -> ConversationStore:
    state: ResponsesState = exchange.services.of("responses")
    return state.conversations


def _id(exchange: Exchange) -> str:
    return str(exchange.path_params["conversation_id"])


def _json(body: dict[str, Any]) -> Reply:
    return Reply(json.dumps(body, ensure_ascii=False).encode())


def _item_list(items: list[dict[str, Any]], has_more: bool = False) -> Reply:
    first = items[0]["id"] if items else None
    last = items[-1]["id"] if items else None
    body = {"object": "list", "data": items, "first_id": first, "last_id": last}
    return _json({**body, "has_more": has_more})


def valid(items: list[InputItem]) -> list[dict[str, Any]]:
    """``items`` as the conversation keeps them, once each is shown to be an item a
    response can continue from (a 400 naming ``items[i]`` otherwise)."""
    try:
        input_messages(items)
    except InvalidRequestError as exc:
        if exc.param is not None and exc.param.startswith("input"):
            exc.param = "items" + exc.param.removeprefix("input")
            exc.message = exc.message.replace("'input[", "'items[")
        raise
    return new_items(items)


async def create_conversation(exchange: Exchange) -> Reply:
    """A new conversation, with its first items (up to 20) and metadata."""
    body = parse_body(ConversationCreate, exchange.body)
    items = valid(body.items or [])
    record = await _store(exchange).create(exchange.key.id, items, body.metadata or {})
    return _json(conversation_object(record))


async def retrieve_conversation(exchange: Exchange) -> Reply:
    record = await _store(exchange).load(_id(exchange), exchange.key.id)
    return _json(conversation_object(record))


async def update_conversation(exchange: Exchange) -> Reply:
    """Replace the conversation's ``metadata``."""
    body = parse_body(ConversationUpdate, exchange.body)
    store = _store(exchange)
    record = await store.load(_id(exchange), exchange.key.id)
    record["metadata"] = body.metadata
    await store.save(record)
    return _json(conversation_object(record))


async def delete_conversation(exchange: Exchange) -> Reply:
    conversation_id = _id(exchange)
    await _store(exchange).delete(conversation_id, exchange.key.id)
    return _json({"id": conversation_id, "object": "conversation.deleted", "deleted": True})


async def list_items(exchange: Exchange) -> Reply:
    """One page of the items, newest first unless ``order=asc``; ``after`` an item id."""
    limit, order, after = _page(exchange.query)
    items = (await _store(exchange).load(_id(exchange), exchange.key.id))["items"]
    items = items if order == "asc" else items[::-1]
    if after is not None:
        ids = [item.get("id") for item in items]
        items = items[ids.index(after) + 1 :] if after in ids else []
    return _item_list(items[:limit], has_more=len(items) > limit)


def _page(query: Mapping[str, str]) -> tuple[int, str, str | None]:
    """``limit`` (1 to 100, 20 by default), ``order`` (``asc`` or ``desc``) and ``after``."""
    given = query.get("limit", "20")
    if not (given.isdigit() and len(given) <= 3 and 1 <= int(given) <= _MAX_LIMIT):
        raise query_error("limit", given, f"an integer from 1 to {_MAX_LIMIT}")
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise query_error("order", order, "'asc' or 'desc'")
    return int(given), order, query.get("after")


async def create_items(exchange: Exchange) -> Reply:
    """Add items (up to 20) at the end of the conversation; the added items."""
    body = parse_body(ConversationItemsCreate, exchange.body)
    added = valid(body.items)
    await _store(exchange).append(_id(exchange), exchange.key.id, added, "items")
    return _item_list(added)


async def retrieve_item(exchange: Exchange) -> Reply:
    record = await _store(exchange).load(_id(exchange), exchange.key.id)
    return _json(item_of(record, str(exchange.path_params["item_id"])))


async def delete_item(exchange: Exchange) -> Reply:
    """Delete one item; the conversation."""
    store = _store(exchange)
    item_id = str(exchange.path_params["item_id"])
    record = await store.load(_id(exchange), exchange.key.id)
    item_of(record, item_id)
    record["items"] = [item for item in record["items"] if item.get("id") != item_id]
    await store.save(record)
    return _json(conversation_object(record))
