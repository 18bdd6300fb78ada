"""A whole chat answer → Gemini's ``GenerateContentResponse``.

One candidate whose ``content`` (role ``model``) has the reasoning first, as a part with
``thought: true`` (only when ``thinkingConfig.includeThoughts`` asked for it, as Gemini
shows thoughts), then the text, then one ``functionCall`` part per tool call (its ``id``,
``name`` and ``args``); ``finish_reason`` ``stop`` and ``tool_calls`` → ``STOP``,
``length`` → ``MAX_TOKENS``, ``content_filter`` → ``SAFETY``. ``usageMetadata`` counts
the prompt (``promptTokenCount``, of which ``cachedContentTokenCount`` were cached), the
answer without its reasoning (``candidatesTokenCount``) and the reasoning
(``thoughtsTokenCount``).
"""

from __future__ import annotations

from typing import Any

from gateway.protocol import ChatCompletion, Usage
from gateway.protocol.messages_codec import tool_input

FINISH_REASONS = {
    "stop": "STOP",
    "tool_calls": "STOP",
    "function_call": "STOP",
    "length": "MAX_TOKENS",
    "content_filter": "SAFETY",
}


def finish_reason(reason: str | None) -> str:
    """Gemini's ``finishReason`` for chat's ``finish_reason``."""
    return FINISH_REASONS.get(reason or "stop", "OTHER")


def usage_metadata(usage: Usage | None) -> dict[str, int]:
    """``usageMetadata`` for chat's usage."""
    if usage is None:
        return {"promptTokenCount": 0, "candidatesTokenCount": 0, "totalTokenCount": 0}
    details = usage.prompt_tokens_details
    cached = details.cached_tokens if details is not None else 0
    out_details = (usage.model_extra or {}).get("completion_tokens_details")
    thoughts = out_details.get("reasoning_tokens") if isinstance(out_details, dict) else None
    thoughts = thoughts if isinstance(thoughts, int) and thoughts > 0 else 0
    metadata = {
        "promptTokenCount": usage.prompt_tokens,
        "candidatesTokenCount": max(0, usage.completion_tokens - thoughts),
        "totalTokenCount": usage.prompt_tokens + usage.completion_tokens,
    }
    if cached:
        metadata["cachedContentTokenCount"] = cached
    if thoughts:
        metadata["thoughtsTokenCount"] = thoughts
    return metadata


def function_call(call_id: str | None, name: str, arguments: str) -> dict[str, Any]:
    """A ``functionCall`` part for a chat tool call (its JSON arguments parsed back)."""
    call: dict[str, Any] = {"name": name, "args": tool_input(arguments)}
    if call_id:
        call["id"] = call_id
    return {"functionCall": call}


def generate_response(answer: ChatCompletion, thoughts: bool) -> dict[str, Any]:
    """The ``GenerateContentResponse`` for a whole chat answer (``thoughts``: show the
    reasoning)."""
    choice = answer.choices[0]
    message = choice.message
    parts: list[dict[str, Any]] = []
    if thoughts and message.reasoning_content:
        parts.append({"text": message.reasoning_content, "thought": True})
    if message.content:
        parts.append({"text": message.content})
    for call in message.tool_calls or []:
        parts.append(function_call(call.id, call.function.name, call.function.arguments))
    candidate = {
        "content": {"role": "model", "parts": parts},
        "finishReason": finish_reason(choice.finish_reason),
        "index": 0,
    }
    return {
        "candidates": [candidate],
        "usageMetadata": usage_metadata(answer.usage),
        "modelVersion": answer.model,
        "responseId": answer.id,
    }
