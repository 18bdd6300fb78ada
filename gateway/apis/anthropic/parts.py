"""Messages content blocks as chat content parts.

``text`` blocks → text parts; ``image`` blocks (a base64 or url ``source``) → ``image_url``
parts; ``document`` blocks with a text ``source`` → text, with a base64 ``source`` (a PDF)
→ ``file`` parts whose name is the block's ``title``. Any other block has no chat part:
the translation refuses it by name, or drops it where the deployment says so.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.errors import InvalidRequestError
from gateway.protocol.chat import ContentPart, ImageURL
from gateway.protocol.messages import Block
from gateway.protocol.messages_codec import file_of_document, image_url


def block_part(block: Block, param: str) -> ContentPart | None:
    """The chat part for ``block`` (``param``: where it is in the request), or ``None``
    when chat has none."""
    if block.type == "text":
        return ContentPart(type="text", text=block.text or "")
    if block.type == "image":
        return _image(block, param)
    source = block.source
    if block.type == "document" and isinstance(source, dict):
        if source.get("type") == "text" and isinstance(source.get("data"), str):
            return ContentPart(type="text", text=str(source["data"]))
        if source.get("type") == "base64":
            title = (block.model_extra or {}).get("title")
            file = file_of_document(source, title, f"{param}.source")
            return ContentPart.model_validate({"type": "file", "file": file})
    return None


def unmapped_extras(block: Block) -> dict[str, Any]:
    """The extra fields of ``block`` that no mapping takes (a base64 document's ``title``
    becomes its file's name)."""
    extra = dict(block.model_extra or {})
    source = block.source
    if block.type == "document" and isinstance(source, dict) and source.get("type") == "base64":
        extra.pop("title", None)
    return extra


def summary(block: Block) -> str:
    """A block chat cannot take, as text for routing's size estimate (base64 data left
    out: a document's bytes are not its tokens)."""
    data = block.model_dump(exclude_none=True)
    source = data.get("source")
    if isinstance(source, dict) and source.get("type") == "base64":
        data["source"] = {**source, "data": ""}
    return json.dumps(data, ensure_ascii=False)


def _image(block: Block, param: str) -> ContentPart:
    source = block.source
    if not isinstance(source, dict):
        raise InvalidRequestError("image blocks need a source", param=f"{param}.source")
    url = image_url(source, f"{param}.source")
    return ContentPart(type="image_url", image_url=ImageURL(url=url))
