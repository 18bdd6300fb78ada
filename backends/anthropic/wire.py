"""OpenAI chat ⇄ Anthropic Messages: the request, the whole answer, stop reasons and usage.

Request (OpenAI → Anthropic): system and developer messages are hoisted into ``system``;
``max_tokens`` gets the deployment's default when the client sets none; ``stop`` becomes
``stop_sequences``; image parts become ``image`` blocks (data URLs → base64 source, http
URLs → url source); tools get an ``input_schema``; ``tool_choice`` auto/required/none/named
becomes auto/any/none/tool; assistant ``tool_calls`` become ``tool_use`` blocks (arguments
parsed from JSON); ``role: tool`` messages become user ``tool_result`` blocks; consecutive
turns of one role are merged. ``temperature`` is capped at 1 (Anthropic's range).
Fields Anthropic has no answer for (``n`` > 1, ``logprobs``, ``response_format``) are
refused with a 400 rather than silently dropped; ``top_k``, ``metadata`` and ``thinking``
pass through.

Answer (Anthropic → OpenAI): text blocks join into ``content``, ``tool_use`` blocks become
``tool_calls`` (input serialised to JSON), thinking goes to ``reasoning_content``.

What the two formats call by different names (stop reasons, tool choice, tools, images,
usage) is mapped in :mod:`gateway.protocol.messages_codec`, shared with the gateway's own
``/v1/messages``, which translates the other way.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.errors import InvalidRequestError
from gateway.protocol import (
    AssistantMessage,
    ChatCompletion,
    ChatCompletionRequest,
    ChatMessage,
    Choice,
    ToolCall,
)
from gateway.protocol.chat import ContentPart, FunctionCall
from gateway.protocol.messages_codec import (
    chat_usage,
    document_of_file,
    finish_reason,
    image_source,
    messages_tool,
    messages_tool_choice,
    tool_arguments,
)

PASSTHROUGH = ("top_k", "metadata", "thinking", "service_tier")


def to_messages_request(
    request: ChatCompletionRequest, *, model: str, default_max_tokens: int, stream: bool
) -> dict[str, Any]:
    """The Anthropic Messages body for an OpenAI chat request."""
    _refuse_unsupported(request)
    system, messages = map_messages(request.messages)
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": request.output_limit() or default_max_tokens,
        "messages": messages,
    }
    if system:
        body["system"] = system
    if request.stop is not None:
        body["stop_sequences"] = request.stop_list()
    if request.temperature is not None:
        body["temperature"] = min(request.temperature, 1.0)
    if request.top_p is not None:
        body["top_p"] = request.top_p
    if request.tools:
        body["tools"] = [
            messages_tool(tool.function.name, tool.function.description, tool.function.parameters)
            for tool in request.tools
        ]
        choice = messages_tool_choice(request.tool_choice, request.parallel_tool_calls)
        if choice is not None:
            body["tool_choice"] = choice
    if request.user:
        body["metadata"] = {"user_id": request.user}
    extras = request.model_extra or {}
    body.update({key: extras[key] for key in PASSTHROUGH if key in extras})
    if stream:
        body["stream"] = True
    return body


def _refuse_unsupported(request: ChatCompletionRequest) -> None:
    if request.n is not None and request.n > 1:
        raise InvalidRequestError("this deployment returns one choice (n must be 1)", param="n")
    if request.logprobs:
        raise InvalidRequestError("this deployment does not return logprobs", param="logprobs")
    fmt = request.response_format
    if fmt is not None and fmt.type != "text":
        raise InvalidRequestError(
            f"this deployment does not support response_format {fmt.type}",
            param="response_format",
        )


def map_messages(messages: list[ChatMessage]) -> tuple[str | None, list[dict[str, Any]]]:
    """``(system, turns)``: system text hoisted, one turn per run of same-role messages."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        if message.role in ("system", "developer"):
            system.append(message.text())
            continue
        role, blocks = _turn(message, i)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    return "\n\n".join(text for text in system if text) or None, turns


def _turn(message: ChatMessage, i: int) -> tuple[str, list[dict[str, Any]]]:
    if message.role == "user":
        return "user", _content_blocks(message, i)
    if message.role == "assistant":
        return "assistant", _content_blocks(message, i) + _tool_uses(message, i)
    if message.role == "tool":
        if not message.tool_call_id:
            raise InvalidRequestError(
                "a tool message needs tool_call_id", param=f"messages[{i}].tool_call_id"
            )
        result = {"type": "tool_result", "tool_use_id": message.tool_call_id}
        return "user", [{**result, "content": message.text()}]
    raise InvalidRequestError(
        f"role {message.role!r} is not supported here; use tool messages",
        param=f"messages[{i}].role",
    )


def _content_blocks(message: ChatMessage, i: int) -> list[dict[str, Any]]:
    content = message.content
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [block for part in content if (block := _part(part, i)) is not None]


def _part(part: ContentPart, i: int) -> dict[str, Any] | None:
    block: dict[str, Any]
    if part.type == "text":
        if not part.text:
            return None
        block = {"type": "text", "text": part.text}
    elif part.type == "image_url" and part.image_url is not None:
        source = image_source(part.image_url.url, param=f"messages[{i}].content")
        block = {"type": "image", "source": source}
    elif part.type == "file" and isinstance(file := (part.model_extra or {}).get("file"), dict):
        block = document_of_file(file, f"messages[{i}].content")
    else:
        raise InvalidRequestError(
            f"content part {part.type!r} is not supported here", param=f"messages[{i}].content"
        )
    cache_control = (part.model_extra or {}).get("cache_control")
    if cache_control is not None:
        block["cache_control"] = cache_control
    return block


def _tool_uses(message: ChatMessage, i: int) -> list[dict[str, Any]]:
    blocks = []
    for call in message.tool_calls or []:
        try:
            args = json.loads(call.function.arguments or "{}")
        except ValueError:
            args = None
        if not isinstance(args, dict):
            raise InvalidRequestError(
                f"tool call {call.id} has arguments that are not a JSON object",
                param=f"messages[{i}].tool_calls",
            )
        blocks.append(
            {"type": "tool_use", "id": call.id, "name": call.function.name, "input": args}
        )
    return blocks


# --- answers ----------------------------------------------------------------------------


def from_message(data: dict[str, Any]) -> ChatCompletion:
    """An OpenAI chat completion for an Anthropic ``message`` (KeyError/TypeError if malformed)."""
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[ToolCall] = []
    for block in data["content"]:
        kind = block["type"]
        if kind == "text":
            texts.append(block["text"])
        elif kind == "tool_use":
            arguments = tool_arguments(block.get("input"))
            function = FunctionCall(name=block["name"], arguments=arguments)
            calls.append(ToolCall(id=block["id"], function=function))
        elif kind == "thinking":
            thinking.append(block.get("thinking", ""))
    text = "".join(texts)
    fields: dict[str, Any] = {
        "content": text or (None if calls else ""),
        "tool_calls": calls or None,
    }
    if thinking:
        fields["reasoning_content"] = "".join(thinking)
    message = AssistantMessage(**fields)
    return ChatCompletion(
        id=data["id"],
        model=data["model"],
        choices=[Choice(message=message, finish_reason=finish_reason(data.get("stop_reason")))],
        usage=chat_usage(data.get("usage") or {}),
    )
