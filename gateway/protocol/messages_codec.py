"""Anthropic Messages ⇄ OpenAI chat: each mapping both directions need, written once, beside
its inverse.

Two places translate between the two wire formats, in opposite directions: the gateway's
own ``/v1/messages`` (:mod:`gateway.apis.anthropic.translation`: a Messages request becomes a chat
request, a chat answer a Messages answer) and the ``anthropic`` backend
(:mod:`backends.anthropic.wire`: a chat request becomes a Messages request, a Messages
answer a chat answer). Both take from here what the two formats call by different names:

=====================  ============================  ================================
what                   Messages → chat               chat → Messages
=====================  ============================  ================================
why the answer ended   :func:`finish_reason`         :func:`stop_reason`
tool choice            :func:`chat_tool_choice`      :func:`messages_tool_choice`
a tool's declaration   :func:`chat_tool`             :func:`messages_tool`
a tool call's input    :func:`tool_arguments`        :func:`tool_input`
an image               :func:`image_url`             :func:`image_source`
a document (base64)    :func:`file_of_document`      :func:`document_of_file`
usage                  :func:`chat_usage`            :func:`message_usage`
reasoning effort       :func:`reasoning_effort`
=====================  ============================  ================================
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gateway.errors import InvalidRequestError
from gateway.protocol.chat import ToolChoice
from gateway.protocol.common import FinishReason, Usage
from gateway.protocol.messages import MessageUsage, StopReason

STOP_REASONS: dict[str, StopReason] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
    "pause_turn": "pause_turn",
}
"""Chat's ``finish_reason`` → Messages' ``stop_reason`` (``pause_turn``: the gateway ended a
turn of hosted tool calls at its bound)."""

FINISH_REASONS: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
"""Messages' ``stop_reason`` → chat's ``finish_reason`` (the inverse of :data:`STOP_REASONS`,
with the reasons only Messages has folded in)."""

CHAT_TOOL_CHOICES: dict[str, str] = {"auto": "auto", "any": "required", "none": "none"}
"""Messages' ``tool_choice.type`` → chat's ``tool_choice`` (``tool``: a named function)."""

MESSAGES_TOOL_CHOICES: dict[str, str] = {chat: kind for kind, chat in CHAT_TOOL_CHOICES.items()}
"""Chat's ``tool_choice`` → Messages' ``tool_choice.type``."""

_CHAT_EMPTY_SCHEMA: dict[str, Any] = {"type": "object"}
_MESSAGES_EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


# --- why the answer ended -------------------------------------------------------------


def stop_reason(finish_reason: str | None) -> StopReason:
    """Messages' ``stop_reason`` for chat's ``finish_reason`` (none or unknown: ``end_turn``)."""
    return STOP_REASONS.get(finish_reason or "stop", "end_turn")


def finish_reason(stop_reason: str | None) -> FinishReason | None:
    """Chat's ``finish_reason`` for Messages' ``stop_reason`` (unknown reasons read as stop)."""
    if stop_reason is None:
        return None
    return FINISH_REASONS.get(stop_reason, "stop")


# --- tools ----------------------------------------------------------------------------


def chat_tool_choice(kind: str, name: str | None) -> str | dict[str, Any]:
    """Chat's ``tool_choice`` for Messages' (``kind`` ``tool`` names the function)."""
    if kind == "tool":
        return {"type": "function", "function": {"name": name}}
    return CHAT_TOOL_CHOICES[kind]


def messages_tool_choice(
    choice: ToolChoice | None, parallel_tool_calls: bool | None
) -> dict[str, Any] | None:
    """Messages' ``tool_choice`` for chat's (and its ``parallel_tool_calls: false``);
    ``None`` when chat left both to the default."""
    out: dict[str, Any]
    if choice is None:
        out = {"type": "auto"}
    elif isinstance(choice, str):
        out = {"type": MESSAGES_TOOL_CHOICES[choice]}
    else:
        out = {"type": "tool", "name": choice.function.name}
    if parallel_tool_calls is False and out["type"] != "none":
        out["disable_parallel_tool_use"] = True
    elif choice is None:
        return None
    return out


def chat_tool(name: str, description: str | None, schema: dict[str, Any] | None) -> dict[str, Any]:
    """A chat ``tools`` entry for a Messages tool (``input_schema`` → ``parameters``)."""
    function: dict[str, Any] = {"name": name, "parameters": schema or _CHAT_EMPTY_SCHEMA}
    if description:
        function["description"] = description
    return {"type": "function", "function": function}


def messages_tool(
    name: str, description: str | None, parameters: dict[str, Any] | None
) -> dict[str, Any]:
    """A Messages ``tools`` entry for a chat function (``parameters`` → ``input_schema``)."""
    out: dict[str, Any] = {"name": name, "input_schema": parameters or _MESSAGES_EMPTY_SCHEMA}
    if description:
        out["description"] = description
    return out


def tool_arguments(tool_input: Mapping[str, Any] | None) -> str:
    """A ``tool_use`` block's ``input`` as a chat tool call's JSON ``arguments``."""
    return json.dumps(tool_input or {}, ensure_ascii=False)


def tool_input(arguments: str) -> dict[str, Any]:
    """A chat tool call's ``arguments`` as ``tool_use.input``: an object, whatever the model
    wrote (text that is not JSON under ``arguments``, another JSON value under ``value``)."""
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"value": value}


# --- images ---------------------------------------------------------------------------


def image_url(source: Mapping[str, Any], param: str) -> str:
    """The chat ``image_url`` for a Messages image ``source`` (base64 → a data URL);
    ``param`` names the source in the request, for the errors."""
    kind, media_type = source.get("type"), source.get("media_type")
    if kind == "base64":
        data = source.get("data")
        if not isinstance(media_type, str) or not isinstance(data, str) or not data:
            raise InvalidRequestError("base64 image sources need media_type and data", param=param)
        return f"data:{media_type};base64,{data}"
    url = source.get("url")
    if kind != "url":
        raise InvalidRequestError(
            f"image sources of type '{kind}' are not supported here", param=f"{param}.type"
        )
    if not isinstance(url, str) or not url:
        raise InvalidRequestError("url image sources need a url", param=f"{param}.url")
    return url


def image_source(url: str, param: str) -> dict[str, Any]:
    """The Messages image ``source`` for a chat image URL: a data URL (base64) or an http(s)
    URL; ``param`` names the part in the request, for the errors."""
    if url.startswith("data:"):
        header, _, data = url.partition(",")
        media_type = header.removeprefix("data:").split(";")[0]
        if ";base64" not in header or not media_type or not data:
            raise InvalidRequestError(
                "image data URLs must be data:<type>;base64,<data>", param=param
            )
        return {"type": "base64", "media_type": media_type, "data": data}
    if url.startswith(("http://", "https://")):
        return {"type": "url", "url": url}
    raise InvalidRequestError("image_url must be a data URL or an http(s) URL", param=param)


def file_of_document(source: Mapping[str, Any], title: Any, param: str) -> dict[str, Any]:
    """Chat's ``file`` for a Messages ``document`` block with a base64 ``source`` (a PDF):
    its data as a data URL, its ``title`` as the file's name (OpenAI asks for a name with
    file data; without a title, ``document`` and the type's extension)."""
    media_type, data = source.get("media_type"), source.get("data")
    if not isinstance(media_type, str) or not isinstance(data, str) or not data:
        raise InvalidRequestError("base64 document sources need media_type and data", param=param)
    name = title if isinstance(title, str) and title else f"document.{media_type.split('/')[-1]}"
    return {"file_data": f"data:{media_type};base64,{data}", "filename": name}


def document_of_file(file: Mapping[str, Any], param: str) -> dict[str, Any]:
    """The Messages ``document`` block for chat's ``file`` (its ``file_data`` data URL; a
    ``file_id`` names a file stored at OpenAI, which Anthropic cannot read)."""
    data_url = file.get("file_data")
    if not isinstance(data_url, str):
        raise InvalidRequestError(
            "file parts need file_data (a data URL) here; file ids are OpenAI's own",
            param=f"{param}.file.file_data",
        )
    header, _, data = data_url.partition(",")
    media_type = header.removeprefix("data:").split(";")[0]
    if not header.startswith("data:") or ";base64" not in header or not media_type or not data:
        raise InvalidRequestError(
            "file_data must be data:<type>;base64,<data>", param=f"{param}.file.file_data"
        )
    block: dict[str, Any] = {
        "type": "document",
        "source": {"type": "base64", "media_type": media_type, "data": data},
    }
    if isinstance(file.get("filename"), str):
        block["title"] = file["filename"]
    return block


# --- reasoning ------------------------------------------------------------------------

EFFORT_BUDGETS: tuple[tuple[int, str], ...] = ((4096, "low"), (16384, "medium"))
"""``thinking.budget_tokens`` below each bound → chat's ``reasoning_effort``; above the
last: ``high``."""


def reasoning_effort(thinking: Mapping[str, Any] | None, effort: Any = None) -> str | None:
    """Chat's ``reasoning_effort`` for Messages' ``thinking`` (``enabled`` with a
    ``budget_tokens``) or ``output_config.effort`` (which wins; ``max`` reads as
    ``high``); ``None`` when the request leaves reasoning to the model."""
    if isinstance(effort, str) and effort in ("low", "medium", "high", "max"):
        return "high" if effort == "max" else effort
    if not thinking or thinking.get("type") != "enabled":
        return None
    budget = thinking.get("budget_tokens")
    if not isinstance(budget, int):
        return None
    return next((name for bound, name in EFFORT_BUDGETS if budget < bound), "high")


# --- usage ----------------------------------------------------------------------------


def chat_usage(usage: Mapping[str, Any]) -> Usage:
    """Chat usage for Messages usage: prompt tokens include cache reads and writes;
    ``cached_tokens`` counts the reads."""
    read = usage.get("cache_read_input_tokens") or 0
    written = usage.get("cache_creation_input_tokens") or 0
    prompt = (usage.get("input_tokens") or 0) + read + written
    chat = Usage.of(prompt, usage.get("output_tokens") or 0, cached_tokens=read)
    chat.server_tool_uses = server_tool_uses(usage.get("server_tool_use"))
    return chat


def server_tool_uses(counts: Any) -> dict[str, int]:
    """``server_tool_use`` (``{"web_search_requests": 3}``) by tool name
    (``{"web_search": 3}``); what is not a count is left out."""
    if not isinstance(counts, Mapping):
        return {}
    return {
        key.removesuffix("_requests"): value
        for key, value in counts.items()
        if isinstance(key, str)
        and key.endswith("_requests")
        and isinstance(value, int)
        and not isinstance(value, bool)
        and value > 0
    }


def message_usage(usage: Usage | None) -> MessageUsage:
    """Messages usage for chat usage: Messages counts cache reads apart from
    ``input_tokens``."""
    if usage is None:
        return MessageUsage(input_tokens=0, output_tokens=0)
    details = usage.prompt_tokens_details
    cached = details.cached_tokens if details is not None else 0
    return MessageUsage(
        input_tokens=usage.prompt_tokens - cached,
        output_tokens=usage.completion_tokens,
        cache_read_input_tokens=cached,
    )
