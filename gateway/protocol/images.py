"""Where a chat request's first image is.

A model that reads no images refuses a request that carries one with a 400 naming the
field (``messages[1].content[0]``; a Responses or Messages request's own name for it, by
its field names: :mod:`gateway.protocol.fieldnames`), rather than with a routing message
about candidates.
"""

from __future__ import annotations

from gateway.protocol.chat import ChatCompletionRequest


def chat_image(body: ChatCompletionRequest) -> str | None:
    """``messages[i].content[j]`` of the first ``image_url`` part."""
    for i, message in enumerate(body.messages):
        if isinstance(message.content, list):
            for j, part in enumerate(message.content):
                if part.type == "image_url":
                    return f"messages[{i}].content[{j}]"
    return None
