"""Content parts (images, audio, files...): where a request's first part of a kind is,
named as its own API names request fields, and the refusal of a kind no deployment reads.

A kind is a chat content part ``type`` (``image_url``, ``input_audio``, ``file``,
``video_url``...): the other APIs' parts are translated into chat parts, so each API's
part maps to one (:data:`RESPONSES_KINDS`; a Messages ``image`` block is ``image_url``).
A model none of whose deployments reads a kind refuses a request that carries one with a
400 naming the part (``messages[1].content[0]`` in chat and Messages,
``input[2].content[1]`` in Responses), rather than with a routing message about candidates.
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.errors import InvalidRequestError
from gateway.protocol.chat import ChatCompletionRequest
from gateway.protocol.messages import MessagesRequest
from gateway.protocol.responses import InputPart, ResponsesRequest

IMAGE_PART = "image_url"
"""The kind of an image part; images keep their own error code."""

RESPONSES_KINDS = {
    "input_text": "text",
    "output_text": "text",
    "text": "text",
    "input_image": IMAGE_PART,
    "input_audio": "input_audio",
    "input_file": "file",
}
"""A Responses content part's type → the kind of the chat part it is translated into."""


def chat_part(body: ChatCompletionRequest, kind: str) -> str | None:
    """``messages[i].content[j]`` of the first part of ``kind``."""
    found = body.first_part((kind,))
    return found[0] if found is not None else None


def responses_part(body: ResponsesRequest, kind: str) -> str | None:
    """``input[i].content[j]`` (or ``input[i].output[j]``) of the first part of ``kind``."""
    if isinstance(body.input, str):
        return None
    for i, item in enumerate(body.input):
        for name, parts in (("content", item.content), ("output", item.output)):
            j = _first_of(parts, kind)
            if j is not None:
                return f"input[{i}].{name}[{j}]"
    return None


def messages_part(body: MessagesRequest, kind: str) -> str | None:
    """``messages[i].content[j]`` (or ``...content[j].content[k]`` in a ``tool_result``)
    of the first ``image`` block, for the image kind: the only blocks that become parts
    other than text."""
    if kind != IMAGE_PART:
        return None
    for i, message in enumerate(body.messages):
        if isinstance(message.content, str):
            continue
        for j, block in enumerate(message.content):
            if block.type == "image":
                return f"messages[{i}].content[{j}]"
            if isinstance(block.content, list):
                k = next((k for k, b in enumerate(block.content) if b.type == "image"), None)
                if k is not None:
                    return f"messages[{i}].content[{j}].content[{k}]"
    return None


def unread_part(kind: str, field: str | None, reader: str) -> InvalidRequestError:
    """The 400 for a part of ``kind`` (at ``field``, when known) that ``reader`` (``The
    model 'm'``, ``The deployment 'd'``) cannot read: ``images_not_supported`` for an
    image, ``content_part_not_supported`` for any other kind."""
    where = f" ('{field}' is one)" if field else ""
    if kind == IMAGE_PART:
        return InvalidRequestError(
            f"{reader} accepts no images{where}; send text only, or use a model that reads images.",
            param=field,
            code="images_not_supported",
        )
    return InvalidRequestError(
        f"{reader} reads no '{kind}' content parts{where}; leave them out, or use a model "
        "that reads them.",
        param=field,
        code="content_part_not_supported",
    )


def _first_of(parts: str | Iterable[InputPart] | None, kind: str) -> int | None:
    if parts is None or isinstance(parts, str):
        return None
    return next((j for j, part in enumerate(parts) if RESPONSES_KINDS.get(part.type) == kind), None)
