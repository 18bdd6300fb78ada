"""``POST /v1/responses/compact``: a conversation made short enough to go on.

The request is a Responses request (``model``, ``input``, ``instructions``,
``previous_response_id``, ``tools``...). The model is asked, after the conversation, for a
summary of it; the answer is a ``response.compaction`` object whose ``output`` keeps the
input's user messages and ends with one ``compaction`` item carrying that summary
(:mod:`gateway.ingress.compaction`). Sending that ``output`` as the next request's input
continues the conversation from the summary. Nothing is stored; it runs on the same
request path as any response (keys, limits, routing, billing).
"""

from __future__ import annotations

import json
import uuid

from litestar import asgi
from litestar.types import Receive, Scope, Send

from gateway.http.responses import ResponsesEndpoint
from gateway.http.serving import handle
from gateway.ingress.compaction import encode_summary
from gateway.ingress.response_history import new_items
from gateway.ingress.responses import ResponsesCall, response_usage
from gateway.protocol import ChatCompletion, new_id
from gateway.protocol.responses import InputItem

_SUMMARIZE = (
    "Write a summary of the conversation above for whoever continues it: the task, what "
    "has been done and found (files, commands, results), decisions taken, and what is left "
    "to do. Be complete but concise. Answer with the summary only; call no tool."
)


class CompactEndpoint(ResponsesEndpoint):
    """A Responses request answered with a compaction of its conversation."""

    def parse(self, raw: bytes) -> ResponsesCall:
        call = super().parse(raw)
        body = call.body
        given = body.input
        items = [InputItem(role="user", content=given)] if isinstance(given, str) else given
        asked = [*items, InputItem(role="user", content=_SUMMARIZE)]
        update = {"input": asked, "stream": False, "store": False}
        if body.tools:
            update["tool_choice"] = "none"
        call.body = body.model_copy(update=update)
        return call

    async def render(self, call: ResponsesCall, answer: ChatCompletion) -> bytes:
        summary = answer.choices[0].message.content or ""
        given = call.body.input
        assert not isinstance(given, str), "parse made the input a list"
        kept = [
            item
            for item in new_items(given[:-1])
            if item["type"] == "message" and item.get("role") == "user"
        ]
        compaction = {
            "type": "compaction",
            "id": new_id("cmp"),
            "encrypted_content": encode_summary(summary),
        }
        resource = {
            "id": f"resp_{uuid.uuid4().hex}",
            "object": "response.compaction",
            "created_at": call.created_at,
            "output": [*kept, compaction],
            "usage": response_usage(answer.usage).model_dump(mode="json"),
        }
        return json.dumps(resource, ensure_ascii=False).encode()


COMPACT = CompactEndpoint()


@asgi("/v1/responses/compact", copy_scope=False)
async def compact_response(scope: Scope, receive: Receive, send: Send) -> None:
    await handle(scope, receive, send, COMPACT)
