"""``GET`` and ``DELETE /v1/responses/{id}``, ``GET /v1/responses/{id}/input_items``: the
stored responses, each readable only with the key that created it (any other key gets the
404 of an id that never existed)."""

from __future__ import annotations

import json
from typing import Any

from gateway.apis.contract import Exchange, Reply
from gateway.apis.responses.history import input_items
from gateway.apis.responses.state import ResponsesState
from gateway.protocol import jsonio
from gateway.protocol.responses import InputItem, InputItemList


async def retrieve_response(exchange: Exchange) -> Reply:
    """A stored response."""
    record = await _stored(exchange)
    return Reply(json.dumps(record["response"]).encode())


async def response_input_items(exchange: Exchange) -> Reply:
    """The input items of a stored response, in order (one page)."""
    record = await _stored(exchange)
    listed = input_item_list(record, str(exchange.path_params["response_id"]))
    return Reply(jsonio.to_json(listed))


async def delete_response(exchange: Exchange) -> Reply:
    """Delete a stored response."""
    state: ResponsesState = exchange.services.of("responses")
    response_id = str(exchange.path_params["response_id"])
    await state.responses.delete(response_id, exchange.key.id)
    body = {"id": response_id, "object": "response.deleted", "deleted": True}
    return Reply(json.dumps(body).encode())


async def _stored(exchange: Exchange) -> dict[str, Any]:
    state: ResponsesState = exchange.services.of("responses")
    return await state.responses.load(str(exchange.path_params["response_id"]), exchange.key.id)


def input_item_list(record: dict[str, Any], response_id: str) -> InputItemList:
    """The stored input of a response as its item list (each item with an id)."""
    given = record.get("input") or ""
    if not isinstance(given, str):
        given = [InputItem.model_validate(item) for item in given]
    items = input_items(given, response_id)
    first = items[0]["id"] if items else ""
    last = items[-1]["id"] if items else ""
    return InputItemList(data=items, first_id=first, last_id=last)
