"""A whole chat answer → Anthropic's ``message``.

The reasoning (``reasoning_content``) becomes a ``thinking`` block first (with an empty
``signature``: only Anthropic signs its own), the text one ``text`` block, each tool call
a ``tool_use`` block (arguments parsed back into ``input``); ``finish_reason`` ``stop`` →
``end_turn`` (``stop_sequence`` when the backend says which stop string ended it),
``length`` → ``max_tokens``, ``tool_calls`` → ``tool_use``.
"""

from __future__ import annotations

from typing import Any

from gateway.protocol import ChatCompletion
from gateway.protocol.messages import MessageResponse
from gateway.protocol.messages_codec import message_usage, stop_reason, tool_input


def message_answer(answer: ChatCompletion) -> MessageResponse:
    """The ``message`` for a whole chat answer."""
    choice = answer.choices[0]
    message = choice.message
    content: list[dict[str, Any]] = []
    if message.reasoning_content:
        content.append(thinking_block(message.reasoning_content))
    if message.content:
        content.append({"type": "text", "text": message.content})
    for call in message.tool_calls or []:
        content.append(
            {
                "type": "tool_use",
                "id": call.id,
                "name": call.function.name,
                "input": tool_input(call.function.arguments),
            }
        )
    matched = (choice.model_extra or {}).get("stop_reason")
    reason = stop_reason(choice.finish_reason)
    sequence = matched if reason == "end_turn" and isinstance(matched, str) else None
    return MessageResponse(
        model=answer.model,
        content=content,
        stop_reason="stop_sequence" if sequence is not None else reason,
        stop_sequence=sequence,
        usage=message_usage(answer.usage),
    )


def thinking_block(text: str) -> dict[str, Any]:
    """A ``thinking`` block for reasoning a chat upstream sent (unsigned)."""
    return {"type": "thinking", "thinking": text, "signature": ""}
