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
    Usage,
)
from gateway.protocol.chat import ContentPart, FunctionCall, Tool
from gateway.protocol.common import FinishReason

FINISH_REASONS: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
PASSTHROUGH = ("top_k", "metadata", "thinking", "service_tier")
_EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


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
        body["tools"] = [_tool(tool) for tool in request.tools]
        choice = _tool_choice(request)
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
        block = {"type": "image", "source": image_source(part.image_url.url, i)}
    else:
        raise InvalidRequestError(
            f"content part {part.type!r} is not supported here", param=f"messages[{i}].content"
        )
    cache_control = (part.model_extra or {}).get("cache_control")
    if cache_control is not None:
        block["cache_control"] = cache_control
    return block


def image_source(url: str, i: int = 0) -> dict[str, Any]:
    """An Anthropic image ``source`` for a data URL (base64) or an http(s) URL."""
    if url.startswith("data:"):
        header, _, data = url.partition(",")
        media_type = header.removeprefix("data:").split(";")[0]
        if ";base64" not in header or not media_type or not data:
            raise InvalidRequestError(
                "image data URLs must be data:<type>;base64,<data>", param=f"messages[{i}].content"
            )
        return {"type": "base64", "media_type": media_type, "data": data}
    if url.startswith(("http://", "https://")):
        return {"type": "url", "url": url}
    raise InvalidRequestError(
        "image_url must be a data URL or an http(s) URL", param=f"messages[{i}].content"
    )


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


def _tool(tool: Tool) -> dict[str, Any]:
    fn = tool.function
    out: dict[str, Any] = {"name": fn.name, "input_schema": fn.parameters or _EMPTY_SCHEMA}
    if fn.description:
        out["description"] = fn.description
    return out


def _tool_choice(request: ChatCompletionRequest) -> dict[str, Any] | None:
    choice = request.tool_choice
    out: dict[str, Any]
    if choice is None:
        out = {"type": "auto"}
    elif isinstance(choice, str):
        out = {"type": {"auto": "auto", "required": "any", "none": "none"}[choice]}
    else:
        out = {"type": "tool", "name": choice.function.name}
    if request.parallel_tool_calls is False and out["type"] != "none":
        out["disable_parallel_tool_use"] = True
    elif choice is None:
        return None
    return out


# --- answers ----------------------------------------------------------------------------


def finish_reason(stop_reason: str | None) -> FinishReason | None:
    """OpenAI's finish_reason for Anthropic's stop_reason (unknown reasons read as stop)."""
    if stop_reason is None:
        return None
    return FINISH_REASONS.get(stop_reason, "stop")


def usage_from(usage: dict[str, Any]) -> Usage:
    """Prompt tokens include cache reads and writes; cached_tokens counts the reads."""
    read = usage.get("cache_read_input_tokens") or 0
    written = usage.get("cache_creation_input_tokens") or 0
    prompt = (usage.get("input_tokens") or 0) + read + written
    return Usage.of(prompt, usage.get("output_tokens") or 0, cached_tokens=read)


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
            arguments = json.dumps(block.get("input") or {})
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
        usage=usage_from(data.get("usage") or {}),
    )
