"""Where a request's first image is, named as its own API names request fields.

A model that reads no images refuses a request that carries one with a 400 naming the
field (``messages[1].content[0]`` in chat and Messages, ``input[2].content[1]`` in
Responses), rather than with a routing message about candidates.
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.protocol.chat import ChatCompletionRequest
from gateway.protocol.messages import Block, MessagesRequest
from gateway.protocol.responses import InputPart, ResponsesRequest


def chat_image(body: ChatCompletionRequest) -> str | None:
    """``messages[i].content[j]`` of the first ``image_url`` part."""
    for i, message in enumerate(body.messages):
        if isinstance(message.content, list):
            for j, part in enumerate(message.content):
                if part.type == "image_url":
                    return f"messages[{i}].content[{j}]"
    return None


def responses_image(body: ResponsesRequest) -> str | None:
    """``input[i].content[j]`` (or ``input[i].output[j]``) of the first ``input_image``."""
    if isinstance(body.input, str):
        return None
    for i, item in enumerate(body.input):
        for name, parts in (("content", item.content), ("output", item.output)):
            j = _first_image(parts)
            if j is not None:
                return f"input[{i}].{name}[{j}]"
    return None


def messages_image(body: MessagesRequest) -> str | None:
    """``messages[i].content[j]`` (or ``...content[j].content[k]`` in a ``tool_result``)
    of the first ``image`` block."""
    for i, message in enumerate(body.messages):
        if isinstance(message.content, str):
            continue
        for j, block in enumerate(message.content):
            if block.type == "image":
                return f"messages[{i}].content[{j}]"
            if isinstance(block.content, list):
                k = next((k for k, b in enumerate(block.content) if _is_image(b)), None)
                if k is not None:
                    return f"messages[{i}].content[{j}].content[{k}]"
    return None


def _first_image(parts: str | Iterable[InputPart] | None) -> int | None:
    if parts is None or isinstance(parts, str):
        return None
    return next((j for j, part in enumerate(parts) if part.type == "input_image"), None)


def _is_image(block: Block) -> bool:
    return block.type == "image"
