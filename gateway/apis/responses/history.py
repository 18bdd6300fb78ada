"""A Responses conversation as chat messages, and its items as listed: what a later turn
continues from (the output of a stored response, hosted MCP calls as the model's call and
its result) and what ``GET .../input_items`` and conversations list."""

from __future__ import annotations

import uuid
from typing import Any

from gateway.apis.responses.tools import ToolMap, custom_arguments
from gateway.errors import InvalidRequestError
from gateway.protocol import ChatMessage
from gateway.protocol.chat import FunctionCall, ToolCall
from gateway.protocol.responses import (
    CustomToolCallItem,
    FunctionCallItem,
    InputItem,
    McpCallItem,
    OutputItem,
    OutputMessage,
)

HOSTED_SEPARATOR = "__"
"""Between an MCP server's label and its tool's name, in the function a model is offered."""


def mcp_call_messages(item: InputItem, i: int) -> list[ChatMessage]:
    """A hosted MCP call the gateway ran earlier: the model's call, then its result."""
    extra = item.model_extra or {}
    label = extra.get("server_label")
    for name, value in (("id", item.id), ("name", item.name), ("server_label", label)):
        if not isinstance(value, str) or not value:
            raise InvalidRequestError(
                f"Missing required parameter: '{name}'.", param=f"input[{i}].{name}"
            )
    assert item.id is not None and item.name is not None
    flat = f"{label}{HOSTED_SEPARATOR}{item.name}"
    call = ToolCall(id=item.id, function=FunctionCall(name=flat, arguments=item.arguments or "{}"))
    said = item.output if isinstance(item.output, str) else None
    result = said if said is not None else f"Error: {extra.get('error')}"
    return [
        ChatMessage(role="assistant", content=None, tool_calls=[call]),
        ChatMessage(role="tool", tool_call_id=item.id, content=result),
    ]


def output_messages(output: list[OutputItem], tools: ToolMap) -> list[dict[str, Any]]:
    """The output items as the chat messages a later turn continues from: the model's text
    and calls as assistant messages, each hosted call's result after the call."""
    messages: list[dict[str, Any]] = []
    text: list[str] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []

    def flush() -> None:
        if text or calls:
            message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
            if calls:
                message["tool_calls"] = list(calls)
            messages.append(message)
        messages.extend(results)
        text.clear()
        calls.clear()
        results.clear()

    for item in output:
        if isinstance(item, OutputMessage):
            if results:  # the model spoke again after a hosted call's result
                flush()
            text.extend(part.text for part in item.content)
        elif isinstance(item, FunctionCallItem | CustomToolCallItem):
            calls.append(_call_message(item, tools))
        elif isinstance(item, McpCallItem):
            function = {"name": f"{item.server_label}{HOSTED_SEPARATOR}{item.name}"}
            function["arguments"] = item.arguments
            calls.append({"id": item.id, "type": "function", "function": function})
            said = item.output if item.output is not None else f"Error: {item.error}"
            results.append({"role": "tool", "tool_call_id": item.id, "content": said})
    flush()
    return messages


def _call_message(item: FunctionCallItem | CustomToolCallItem, tools: ToolMap) -> dict[str, Any]:
    flat = tools.flat(item.name, item.namespace)
    arguments = (
        item.arguments if isinstance(item, FunctionCallItem) else custom_arguments(item.input)
    )
    return {
        "id": item.call_id,
        "type": "function",
        "function": {"name": flat, "arguments": arguments},
    }


def new_items(given: str | list[InputItem]) -> list[dict[str, Any]]:
    """``given`` as a conversation keeps them: typed, content as parts, each with an id."""
    return input_items(given, f"resp_{uuid.uuid4().hex}")


def input_items(given: str | list[InputItem], response_id: str) -> list[dict[str, Any]]:
    """The request's input items as ``GET .../input_items`` lists them, each with an id."""
    if isinstance(given, str):
        given = [InputItem(role="user", content=given)]
    items = []
    stem = response_id.removeprefix("resp_")
    for i, item in enumerate(given):
        data = item.model_dump(mode="json", exclude_none=True)
        if item.type == "message":
            content = data.get("content")
            if isinstance(content, str):
                kind = "output_text" if item.role == "assistant" else "input_text"
                data["content"] = [{"type": kind, "text": content}]
            if item.role == "assistant":  # listed as output messages are
                for part in data["content"]:
                    part.setdefault("annotations", [])
                    part.setdefault("logprobs", [])
        data.setdefault("status", "completed")
        data.setdefault("id", f"{_ITEM_PREFIX.get(item.type, 'item')}_{stem}_{i}")
        data["type"] = item.type
        items.append(data)
    return items


_ITEM_PREFIX = {
    "message": "msg",
    "function_call": "fc",
    "function_call_output": "fco",
    "custom_tool_call": "ctc",
    "custom_tool_call_output": "ctco",
    "reasoning": "rs",
    "compaction": "cmp",
    "mcp_call": "mcp",
    "mcp_list_tools": "mcpl",
    "mcp_approval_request": "mcpr",
    "mcp_approval_response": "mcpa",
}
