"""Responses ``input`` as chat messages.

Messages (``input_text`` / ``output_text`` parts as text; ``input_image`` / ``input_audio``
/ ``input_file`` as chat's ``image_url`` / ``input_audio`` / ``file`` parts),
``function_call`` / ``custom_tool_call`` items (consecutive ones become one assistant
message with several ``tool_calls``) and their outputs (``tool`` messages), ``mcp_call``
items and compaction summaries. Where each message came from is noted so that a refusal
names the input item as the client sent it.
"""

from __future__ import annotations

from typing import Any

from gateway.apis.responses.compaction import summary_message
from gateway.apis.responses.history import mcp_call_messages
from gateway.apis.responses.names import call_site, field_origin, item_origins
from gateway.apis.responses.tools import ToolMap, custom_arguments
from gateway.errors import InvalidRequestError
from gateway.protocol import ChatMessage
from gateway.protocol.chat import ContentPart, FunctionCall, ImageURL, ToolCall
from gateway.protocol.fieldnames import Origin
from gateway.protocol.parts import joined
from gateway.protocol.responses import InputItem, InputPart

# items that become no chat message: their tools join the request's (additional_tools),
# or the table of :mod:`~.fields` says what becomes of them
_SKIPPED_ITEMS = (
    "reasoning",
    "additional_tools",
    "mcp_list_tools",
    "mcp_approval_request",
    "mcp_approval_response",
)
_MCP_ITEMS = ("mcp_list_tools", "mcp_approval_request", "mcp_approval_response")
_OUTPUTS = ("function_call_output", "custom_tool_call_output")


def input_messages(
    given: str | list[InputItem],
    tools: ToolMap | None = None,
    origins: list[Origin] | None = None,
    *,
    report: bool = False,
) -> list[ChatMessage]:
    """The chat messages of ``input`` (``tools``: how tool names reach the upstream);
    where each came from is added to ``origins``, when given. ``report``: items chat takes
    no part of are named in ``tools.dropped``, or refused by name (a request's own input;
    a stored conversation's items were read so once already)."""
    noted = origins if origins is not None else []
    if isinstance(given, str):
        noted.append(field_origin("input"))
        return [ChatMessage(role="user", content=given)]
    tools = tools if tools is not None else ToolMap()
    messages: list[ChatMessage] = []
    for i, item in enumerate(given):
        before = len(messages)
        if report and item.type in _SKIPPED_ITEMS:
            _left_out(item, i, tools)
        if item.type == "message":
            messages.append(_message(item, i))
        elif item.type in ("function_call", "custom_tool_call"):
            _tool_call(messages, item, i, tools)
        elif item.type in _OUTPUTS:
            messages.append(_tool_output(item, i))
        elif item.type == "mcp_call":
            messages.extend(mcp_call_messages(item, i))
        elif item.type in ("compaction", "compaction_summary"):
            messages.append(summary_message(item.encrypted_content, i))
        elif item.type not in _SKIPPED_ITEMS:
            raise InvalidRequestError(
                f"Input items of type '{item.type}' are not supported by this gateway.",
                param=f"input[{i}].type",
            )
        if len(messages) > before:
            noted.extend(item_origins(item, i, len(messages) - before))
        elif item.type in ("function_call", "custom_tool_call") and noted:
            noted[-1].calls.append(call_site(item, i))  # one more call of the message before
    return messages


def refuse_orphan_outputs(given: str | list[InputItem], messages: list[ChatMessage]) -> None:
    """A 400 naming the first tool output in ``given`` whose ``call_id`` no call among
    ``messages`` (the conversation so far and this input) made: no upstream takes a tool
    message without its call, and OpenAI refuses it in the same words."""
    if isinstance(given, str):
        return
    called = {call.id for message in messages for call in message.tool_calls or ()}
    for i, item in enumerate(given):
        if item.type in _OUTPUTS and item.call_id and item.call_id not in called:
            raise InvalidRequestError(
                f"No tool call found for function call output with call_id {item.call_id}.",
                param=f"input[{i}].call_id",
            )


def _left_out(item: InputItem, i: int, tools: ToolMap) -> None:
    """An item that becomes no chat message, as the Responses table classifies it: the
    reasoning of an earlier turn is reported (chat takes none back); the items of hosted
    MCP tools are the gateway's to read when it runs them, else they go as the request's
    hosted tools go (dropped and reported, or refused by name)."""
    name = item.type
    if name == "reasoning":
        tools.left_out(name)
    elif name not in _MCP_ITEMS or tools.gateway_runs:
        return  # additional_tools (its tools are the request's), or the gateway's to read
    elif tools.hosted == "drop":
        tools.left_out(name)
    else:
        raise InvalidRequestError(
            f"Input items of type '{name}' belong to an mcp tool, and this request has "
            "none the gateway runs.",
            param=f"input[{i}].type",
        )


def _tool_output(item: InputItem, i: int) -> ChatMessage:
    if not item.call_id:
        raise InvalidRequestError(
            "Missing required parameter: 'call_id'.", param=f"input[{i}].call_id"
        )
    output = item.output if item.output is not None else ""
    text = output if isinstance(output, str) else _parts_text(output)
    return ChatMessage(role="tool", tool_call_id=item.call_id, content=text)


def _message(item: InputItem, i: int) -> ChatMessage:
    if item.role is None:
        raise InvalidRequestError("Missing required parameter: 'role'.", param=f"input[{i}].role")
    content = item.content
    if content is None:
        raise InvalidRequestError(
            "Missing required parameter: 'content'.", param=f"input[{i}].content"
        )
    if isinstance(content, str):
        return ChatMessage(role=item.role, content=content)
    parts = [_part(part, i, j) for j, part in enumerate(content)]
    if item.role != "user" or all(part.type == "text" for part in parts):
        # only a user turn may carry images; other roles are plain text
        texts = [p.text or "" for p in parts]
        text = "".join(texts) if item.role == "assistant" else joined(texts)
        return ChatMessage(role=item.role, content=text)
    return ChatMessage(role=item.role, content=parts)


def _part(part: InputPart, i: int, j: int) -> ContentPart:
    if part.type in ("input_text", "output_text", "text"):
        return ContentPart(type="text", text=part.text or "")
    if part.type == "input_image":
        if not part.image_url:
            raise InvalidRequestError(
                "Images need an image_url (a data URL or an http(s) URL); file ids are not "
                "supported by this gateway.",
                param=f"input[{i}].content[{j}].image_url",
            )
        detail = part.detail if part.detail in ("auto", "low", "high") else None
        return ContentPart(type="image_url", image_url=ImageURL(url=part.image_url, detail=detail))
    if part.type == "input_audio":
        return ContentPart.model_validate({"type": "input_audio", **_extras(part, "input_audio")})
    if part.type == "input_file":
        return _file_part(part, i, j)
    raise InvalidRequestError(
        f"Content parts of type '{part.type}' are not supported by this gateway.",
        param=f"input[{i}].content[{j}].type",
    )


def _file_part(part: InputPart, i: int, j: int) -> ContentPart:
    """An ``input_file`` as chat's ``file`` part (its data, id and name)."""
    fields = {"file_id": part.file_id, **_extras(part, "file_data", "filename")}
    file = {name: value for name, value in fields.items() if value is not None}
    if "file_data" not in file and "file_id" not in file:
        raise InvalidRequestError(
            "Files need file_data (a data URL) or a file_id; file URLs are not supported "
            "by this gateway.",
            param=f"input[{i}].content[{j}].file_data",
        )
    return ContentPart.model_validate({"type": "file", "file": file})


def _extras(part: InputPart, *names: str) -> dict[str, Any]:
    extra = part.model_extra or {}
    return {name: extra[name] for name in names if name in extra}


def _parts_text(parts: list[InputPart]) -> str:
    return joined([part.text or "" for part in parts])


def _tool_call(messages: list[ChatMessage], item: InputItem, i: int, tools: ToolMap) -> None:
    for name in ("call_id", "name"):
        if not getattr(item, name):
            raise InvalidRequestError(
                f"Missing required parameter: '{name}'.", param=f"input[{i}].{name}"
            )
    assert item.call_id is not None and item.name is not None
    if item.type == "custom_tool_call":
        arguments = custom_arguments(item.input or "")
    else:
        arguments = item.arguments or "{}"
    flat = tools.flat(item.name, item.namespace)
    call = ToolCall(id=item.call_id, function=FunctionCall(name=flat, arguments=arguments))
    last = messages[-1] if messages else None
    if last is not None and last.role == "assistant":
        last.tool_calls = [*(last.tool_calls or []), call]
    else:
        messages.append(ChatMessage(role="assistant", content=None, tool_calls=[call]))
