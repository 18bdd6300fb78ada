"""Content parts (images, audio, files...): the refusal of a kind no deployment reads,
and how a translation joins text parts.

A kind is a chat content part ``type`` (``image_url``, ``input_audio``, ``file``,
``video_url``...): the other APIs' parts are translated into chat parts, so each API's
part is one of these. A model none of whose deployments reads a kind refuses a request
that carries one with a 400 naming the part by its chat path (``messages[1].content[0]``),
which the request spine renames as the called API names it (``input[2].content[1]`` in
Responses: :mod:`gateway.protocol.fieldnames`), rather than with a routing message about
candidates.
"""

from __future__ import annotations

from gateway.errors import InvalidRequestError

IMAGE_PART = "image_url"
"""The kind of an image part; images keep their own error code."""
TEXT_SEPARATOR = "\n\n"
"""Between the text parts of one user, system or tool message when a translation makes
them one text: a document and the question after it stay two paragraphs ("The end." and
"Summarise" reach the model as "The end.\n\nSummarise"). An assistant's parts are joined
as they are: its text blocks are one answer (citations split it mid-sentence)."""


def joined(texts: list[str]) -> str:
    """The text parts of a user, system or tool message as one text."""
    return TEXT_SEPARATOR.join(text for text in texts if text)


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
