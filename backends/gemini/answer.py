"""Gemini ``GenerateContentResponse`` → OpenAI chat: parts, why the answer ended, usage.

``candidates[0].content.parts``: text parts join into ``content``, parts marked ``thought``
into ``reasoning_content``, ``functionCall`` parts become ``tool_calls`` (args serialised
to JSON, the thought signature kept in the id: :mod:`backends.gemini.calls`).
``finishReason`` maps by :data:`FINISH_REASONS` (an answer with function calls finishes
``tool_calls``); an answer without candidates (the prompt blocked) is an empty
``content_filter`` answer. ``usageMetadata`` becomes :class:`~gateway.protocol.Usage`
(:func:`chat_usage`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from backends.gemini import calls
from gateway.protocol import AssistantMessage, ChatCompletion, Choice, ToolCall, Usage, new_id
from gateway.protocol.chat import FunctionCall
from gateway.protocol.common import FinishReason

FINISH_REASONS: dict[str, FinishReason] = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "LANGUAGE": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter",
    "IMAGE_PROHIBITED_CONTENT": "content_filter",
    "IMAGE_RECITATION": "content_filter",
}
"""Gemini's ``finishReason`` → chat's ``finish_reason``; any other reason reads as stop."""


@dataclass
class Parts:
    """What one response's parts say, by kind."""

    text: list[str] = field(default_factory=list)
    thoughts: list[str] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)


def read_parts(parts: list[dict[str, Any]]) -> Parts:
    """The text, thoughts and function calls of a candidate's parts."""
    out = Parts()
    for part in parts:
        call = part.get("functionCall")
        if isinstance(call, dict):
            out.calls.append(tool_call(call, part.get("thoughtSignature")))
        elif isinstance(text := part.get("text"), str):
            (out.thoughts if part.get("thought") else out.text).append(text)
    return out


def tool_call(call: dict[str, Any], signature: Any) -> ToolCall:
    """A chat tool call for a ``functionCall`` and its part's ``thoughtSignature``."""
    call_id = call.get("id") or calls.new_call_id()
    sign = signature if isinstance(signature, str) else None
    arguments = json.dumps(call.get("args") or {}, ensure_ascii=False)
    function = FunctionCall(name=call["name"], arguments=arguments)
    return ToolCall(id=calls.join(call_id, sign), function=function)


def finish_reason(reason: str | None, *, called: bool) -> FinishReason | None:
    """Chat's ``finish_reason`` for Gemini's (``None`` while the answer runs)."""
    if reason is None:
        return None
    if called and reason in ("STOP", "FINISH_REASON_UNSPECIFIED"):
        return "tool_calls"
    return FINISH_REASONS.get(reason, "stop")


def chat_usage(meta: dict[str, Any] | None) -> Usage:
    """Chat usage for ``usageMetadata``: the prompt counts tool-use prompt tokens too and
    its cached tokens are ``cachedContentTokenCount``; completion tokens count the
    thoughts, which ``completion_tokens_details.reasoning_tokens`` also gives."""
    meta = meta or {}
    prompt = _count(meta, "promptTokenCount") + _count(meta, "toolUsePromptTokenCount")
    answer = _count(meta, "candidatesTokenCount") or _count(meta, "responseTokenCount")
    thoughts = _count(meta, "thoughtsTokenCount")
    usage = Usage.of(
        prompt, answer + thoughts, cached_tokens=_count(meta, "cachedContentTokenCount")
    )
    if thoughts:
        usage = Usage.model_validate(
            {**usage.model_dump(), "completion_tokens_details": {"reasoning_tokens": thoughts}}
        )
    return usage


def _count(meta: dict[str, Any], key: str) -> int:
    value = meta.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def from_response(data: dict[str, Any], model: str) -> ChatCompletion:
    """A chat completion for a whole ``GenerateContentResponse`` (``KeyError`` /
    ``TypeError`` / ``AttributeError`` if it is malformed)."""
    candidates = data.get("candidates") or []
    candidate = candidates[0] if candidates else {}
    parts = read_parts((candidate.get("content") or {}).get("parts") or [])
    fields: dict[str, Any] = {
        "content": "".join(parts.text) or (None if parts.calls else ""),
        "tool_calls": parts.calls or None,
    }
    if parts.thoughts:
        fields["reasoning_content"] = "".join(parts.thoughts)
    if candidates:
        finish = finish_reason(candidate.get("finishReason") or "STOP", called=bool(parts.calls))
    else:
        finish = "content_filter"  # promptFeedback.blockReason: nothing was generated
    return ChatCompletion(
        id=data.get("responseId") or new_id("chatcmpl"),
        model=model,
        choices=[Choice(message=AssistantMessage(**fields), finish_reason=finish or "stop")],
        usage=chat_usage(data.get("usageMetadata")),
    )
