"""``POST /v1/responses/compact``: a conversation made short enough to go on.

The request is a Responses request (``model``, ``input``, ``instructions``,
``previous_response_id``, ``tools``...). The model is asked, after the conversation, for a
summary of it; the answer is a ``response.compaction`` object whose ``output`` keeps the
input's user messages and ends with one ``compaction`` item carrying that summary
(:mod:`gateway.apis.responses.compaction`). Sending that ``output`` as the next request's
input continues the conversation from the summary. ``previous_response_id`` alone
compacts the stored conversation; with neither, the empty input is refused. Nothing is
stored; it runs on the same request path as any response (keys, limits, routing,
billing).
"""

from __future__ import annotations

import json
import uuid

from gateway.apis.contract import Decoded, Exchange, Outcome, Reply
from gateway.apis.responses.codec import decoded_of, prepare, read
from gateway.apis.responses.compaction import encode_summary
from gateway.apis.responses.history import new_items
from gateway.apis.responses.translation import ResponsesCall, response_usage
from gateway.errors import InvalidRequestError
from gateway.protocol import ChatCompletion, item_id
from gateway.protocol.responses import InputItem

_SUMMARIZE = (
    "Write a summary of the conversation above for whoever continues it: the task, what "
    "has been done and found (files, commands, results), decisions taken, and what is left "
    "to do. Be complete but concise. Answer with the summary only; call no tool."
)


class CompactCodec:
    """A Responses request answered with a compaction of its conversation."""

    async def decode(self, exchange: Exchange) -> Decoded:
        call = read(exchange.body)
        body = call.body
        given = body.input
        if not given and body.previous_response_id is None:  # nothing to compact
            raise InvalidRequestError("The input is empty.", param="input")
        items = [InputItem(role="user", content=given)] if isinstance(given, str) else given
        asked = [*items, InputItem(role="user", content=_SUMMARIZE)]
        update = {"input": asked, "stream": False, "store": False}
        if body.tools:
            update["tool_choice"] = "none"
        call.body = body.model_copy(update=update)
        await prepare(exchange, call)
        return decoded_of(call)

    async def encode(self, decoded: Decoded, outcome: Outcome) -> Reply:
        return Reply(compaction(decoded.call, outcome.answer), outcome.headers)


def compaction(call: ResponsesCall, answer: ChatCompletion) -> bytes:
    """The ``response.compaction`` object of a summary."""
    summary = answer.choices[0].message.content or ""
    given = call.body.input
    assert not isinstance(given, str), "decode made the input a list"
    stored = [  # the user's turns of a stored conversation (previous_response_id) first
        InputItem(role="user", content=message["content"])
        for message in call.history
        if message.get("role") == "user" and isinstance(message.get("content"), str)
    ]
    kept = [
        item
        for item in new_items([*stored, *given[:-1]])
        if item["type"] == "message" and item.get("role") == "user"
    ]
    compacted = {
        "type": "compaction",
        "id": item_id("cmp"),
        "encrypted_content": encode_summary(summary),
    }
    resource = {
        "id": f"resp_{uuid.uuid4().hex}",
        "object": "response.compaction",
        "created_at": call.created_at,
        "output": [*kept, compacted],
        "usage": response_usage(answer.usage).model_dump(mode="json"),
    }
    return json.dumps(resource, ensure_ascii=False).encode()
