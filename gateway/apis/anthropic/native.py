"""What a Messages upstream is sent of a request passed through: the client's bytes, but
for what Anthropic would refuse and only a translation made."""

from __future__ import annotations

from typing import Any


def signed_only(messages: Any) -> dict[str, Any]:
    """``messages`` without the ``thinking`` blocks no one signed (those a translation
    made from a chat upstream's reasoning, replayed by the client), as a change to splice;
    empty when there are none. Anthropic refuses a bad signature, and a turn left empty
    goes too."""
    if not isinstance(messages, list):
        return {}
    kept, changed = [], False
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            kept.append(message)
            continue
        blocks = [block for block in content if not _unsigned(block)]
        changed = changed or len(blocks) < len(content)
        if blocks:
            kept.append({**message, "content": blocks} if len(blocks) < len(content) else message)
    return {"messages": kept} if changed else {}


def _unsigned(block: Any) -> bool:
    return (
        isinstance(block, dict) and block.get("type") == "thinking" and not block.get("signature")
    )
