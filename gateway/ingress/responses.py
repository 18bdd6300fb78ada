"""OpenAI Responses ⇄ the gateway's chat request and answer.

Request (Responses → chat): ``instructions`` become the first system message, then the
stored conversation of ``previous_response_id`` (its input and output, not its
instructions, as OpenAI does), then ``input``: messages (``input_text`` / ``output_text`` /
``input_image`` parts), ``function_call`` items (consecutive ones become one assistant
message with several ``tool_calls``) and ``function_call_output`` items (``tool``
messages). ``tools`` (function tools only), ``tool_choice``, ``parallel_tool_calls``,
``max_output_tokens``, ``temperature``, ``top_p``, ``text.format`` (→ ``response_format``)
and ``user`` map one to one; ``reasoning`` items carry nothing a chat model can use and are
skipped.

Answer (chat → Responses): text becomes one ``message`` output item, each tool call a
``function_call`` item; ``finish_reason`` ``length`` makes the response ``incomplete``
(``max_output_tokens``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.errors import InvalidRequestError
from gateway.ingress.store import ResponseStore
from gateway.protocol import ChatCompletion, ChatCompletionRequest, ChatMessage, Usage, now
from gateway.protocol.chat import ContentPart, FunctionCall, ImageURL, ToolCall
from gateway.protocol.responses import (
    FunctionCallItem,
    IncompleteDetails,
    InputItem,
    InputPart,
    ItemStatus,
    OutputItem,
    OutputMessage,
    OutputText,
    ResponseObject,
    ResponsesRequest,
    ResponseUsage,
)

_ROLES = ("user", "assistant", "system", "developer")


@dataclass
class ResponsesCall:
    """One ``POST /v1/responses``: the request, the chat request it became, and what the
    stored conversation needs (``history``: the chat messages before this turn)."""

    body: ResponsesRequest
    owner: str
    response_id: str
    history: list[dict[str, Any]] = field(default_factory=list)
    turn: list[ChatMessage] = field(default_factory=list)
    chat: ChatCompletionRequest | None = None
    store: ResponseStore | None = None
    created_at: int = field(default_factory=now)
    streams: dict[str, Any] = field(default_factory=dict)

    @property
    def model(self) -> str:
        return self.body.model

    @property
    def stream(self) -> bool:
        return bool(self.body.stream)

    def include_usage(self) -> bool:
        return False

    def chat_request(self) -> ChatCompletionRequest:
        assert self.chat is not None, "the call is prepared before it is served"
        return self.chat


def to_chat(
    body: ResponsesRequest, history: list[dict[str, Any]]
) -> tuple[ChatCompletionRequest, list[ChatMessage]]:
    """The chat request for a Responses request after ``history`` (stored chat messages),
    and the chat messages of this turn's input."""
    messages: list[ChatMessage] = []
    if body.instructions:
        messages.append(ChatMessage(role="system", content=body.instructions))
    messages.extend(ChatMessage.model_validate(m) for m in history)
    turn = input_messages(body.input)
    messages.extend(turn)
    if not messages:
        raise InvalidRequestError("The input is empty.", param="input")
    fields: dict[str, Any] = {
        "model": body.model,
        "messages": messages,
        "max_tokens": body.max_output_tokens,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "user": body.user,
        "parallel_tool_calls": body.parallel_tool_calls,
        "stream": body.stream,
    }
    if body.tools:
        fields["tools"] = [_tool(tool, i) for i, tool in enumerate(body.tools)]
        if body.tool_choice is not None:
            fields["tool_choice"] = _tool_choice(body.tool_choice)
    elif body.tool_choice not in (None, "auto", "none"):
        raise InvalidRequestError("tool_choice needs tools.", param="tool_choice")
    fmt = body.text.format if body.text is not None else None
    if fmt is not None and fmt.type != "text":
        fields["response_format"] = _response_format(fmt.model_dump(by_alias=True))
    extras = {k: v for k, v in (body.model_extra or {}).items() if k in ("seed", "stop", "top_k")}
    return ChatCompletionRequest(**fields, **extras), turn


def input_messages(given: str | list[InputItem]) -> list[ChatMessage]:
    """The chat messages of ``input``."""
    if isinstance(given, str):
        return [ChatMessage(role="user", content=given)]
    messages: list[ChatMessage] = []
    for i, item in enumerate(given):
        if item.type == "message":
            messages.append(_message(item, i))
        elif item.type == "function_call":
            _function_call(messages, item, i)
        elif item.type == "function_call_output":
            if not item.call_id:
                raise InvalidRequestError(
                    "Missing required parameter: 'call_id'.", param=f"input[{i}].call_id"
                )
            output = item.output if item.output is not None else ""
            text = output if isinstance(output, str) else _parts_text(output)
            messages.append(ChatMessage(role="tool", tool_call_id=item.call_id, content=text))
        elif item.type != "reasoning":
            raise InvalidRequestError(
                f"Input items of type '{item.type}' are not supported by this gateway.",
                param=f"input[{i}].type",
            )
    return messages


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
        return ChatMessage(role=item.role, content="".join(p.text or "" for p in parts))
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
    raise InvalidRequestError(
        f"Content parts of type '{part.type}' are not supported by this gateway.",
        param=f"input[{i}].content[{j}].type",
    )


def _parts_text(parts: list[InputPart]) -> str:
    return "".join(part.text or "" for part in parts)


def _function_call(messages: list[ChatMessage], item: InputItem, i: int) -> None:
    for name in ("call_id", "name"):
        if not getattr(item, name):
            raise InvalidRequestError(
                f"Missing required parameter: '{name}'.", param=f"input[{i}].{name}"
            )
    assert item.call_id is not None and item.name is not None
    call = ToolCall(
        id=item.call_id, function=FunctionCall(name=item.name, arguments=item.arguments or "{}")
    )
    last = messages[-1] if messages else None
    if last is not None and last.role == "assistant":
        last.tool_calls = [*(last.tool_calls or []), call]
    else:
        messages.append(ChatMessage(role="assistant", content=None, tool_calls=[call]))


def _tool(tool: Any, i: int) -> dict[str, Any]:
    if tool.type != "function":
        raise InvalidRequestError(
            f"Tools of type '{tool.type}' are not supported by this gateway; use function tools.",
            param=f"tools[{i}].type",
        )
    if not tool.name:
        raise InvalidRequestError("Missing required parameter: 'name'.", param=f"tools[{i}].name")
    function: dict[str, Any] = {"name": tool.name}
    if tool.description is not None:
        function["description"] = tool.description
    if tool.parameters is not None:
        function["parameters"] = tool.parameters
    if tool.strict is not None:
        function["strict"] = tool.strict
    return {"type": "function", "function": function}


def _tool_choice(choice: str | dict[str, Any]) -> Any:
    if isinstance(choice, str):
        return choice
    if choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise InvalidRequestError(
        "tool_choice must be 'none', 'auto', 'required' or {\"type\": \"function\", "
        '"name": ...}.',
        param="tool_choice",
    )


def _response_format(fmt: dict[str, Any]) -> dict[str, Any]:
    if fmt["type"] == "json_object":
        return {"type": "json_object"}
    if fmt.get("schema") is None:
        raise InvalidRequestError(
            "Missing required parameter: 'text.format.schema'.", param="text.format.schema"
        )
    schema = {k: fmt[k] for k in ("name", "description", "schema", "strict") if fmt.get(k)}
    return {"type": "json_schema", "json_schema": {"name": "response", **schema}}


# --- answers ----------------------------------------------------------------------------


def response_object(call: ResponsesCall, **fields: Any) -> ResponseObject:
    """The response object of ``call`` with its request's settings echoed."""
    body = call.body
    fmt = body.text.format if body.text is not None and body.text.format is not None else None
    text = {"format": fmt.model_dump(by_alias=True, exclude_none=True)} if fmt else None
    echoed: dict[str, Any] = {
        "id": call.response_id,
        "created_at": call.created_at,
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "model": body.model,
        "parallel_tool_calls": body.parallel_tool_calls is not False,
        "previous_response_id": body.previous_response_id,
        "store": body.store is not False,
        "temperature": body.temperature,
        "tool_choice": body.tool_choice if body.tool_choice is not None else "auto",
        "tools": [_tool_echo(t) for t in body.tools or []],
        "top_p": body.top_p,
        "user": body.user,
        "metadata": body.metadata or {},
    }
    if text is not None:
        echoed["text"] = text
    return ResponseObject(**{**echoed, **fields})


def _tool_echo(tool: Any) -> dict[str, Any]:
    return {
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.parameters,
        "strict": tool.strict,
    }


def completed(call: ResponsesCall, answer: ChatCompletion) -> ResponseObject:
    """The finished response for a whole chat answer."""
    choice = answer.choices[0]
    output: list[OutputItem] = []
    status: ItemStatus = (
        "incomplete" if choice.finish_reason in ("length", "content_filter") else "completed"
    )
    if choice.message.content:
        text = OutputText(text=choice.message.content)
        output.append(OutputMessage(status=status, content=[text]))
    for tool_call in choice.message.tool_calls or []:
        fn = tool_call.function
        item = FunctionCallItem(
            status=status, call_id=tool_call.id, name=fn.name, arguments=fn.arguments
        )
        output.append(item)
    return finished(call, output, choice.finish_reason, answer.usage, answer.model)


def finished(
    call: ResponsesCall,
    output: list[OutputItem],
    finish_reason: str | None,
    usage: Usage | None,
    model: str | None = None,
) -> ResponseObject:
    """The response once generation ended: status, incomplete details, usage."""
    fields: dict[str, Any] = {"output": output, "usage": response_usage(usage)}
    if model:
        fields["model"] = model
    if finish_reason == "length":
        fields.update(status="incomplete", incomplete_details=_incomplete("max_output_tokens"))
    elif finish_reason == "content_filter":
        fields.update(status="incomplete", incomplete_details=_incomplete("content_filter"))
    else:
        fields.update(status="completed", completed_at=now())
    return response_object(call, **fields)


def _incomplete(reason: str) -> IncompleteDetails:
    return IncompleteDetails.model_validate({"reason": reason})


def response_usage(usage: Usage | None) -> ResponseUsage:
    if usage is None:
        return ResponseUsage.of(0, 0)
    details = usage.prompt_tokens_details
    cached = details.cached_tokens if details is not None else 0
    return ResponseUsage.of(usage.prompt_tokens, usage.completion_tokens, cached)


def output_messages(output: list[OutputItem]) -> list[dict[str, Any]]:
    """The output items as the chat messages a later turn continues from."""
    text = "".join(
        part.text for item in output if isinstance(item, OutputMessage) for part in item.content
    )
    calls = [
        {
            "id": i.call_id,
            "type": "function",
            "function": {"name": i.name, "arguments": i.arguments},
        }
        for i in output
        if isinstance(i, FunctionCallItem)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = calls
    return [message]


def dump_messages(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    return [m.model_dump(mode="json", exclude_none=True) for m in messages]


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


_ITEM_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco"}
