"""Compaction items: a conversation's earlier turns as a summary the gateway wrote.

``POST /v1/responses/compact`` answers a ``compaction`` item whose ``encrypted_content``
is opaque to the client (as at OpenAI) but is, here, the summary itself, encoded with a
marker; a later request that brings the item back gets the summary as a user message in
its place. A compaction item made elsewhere (OpenAI's own, encrypted) cannot be read here
and is refused by name.
"""

from __future__ import annotations

import base64
import binascii

from gateway.errors import InvalidRequestError
from gateway.protocol import ChatMessage

_MARKER = "shunter-summary-v1:"
SUMMARY_HEADING = "A summary of the conversation so far:\n"


def encode_summary(summary: str) -> str:
    """The ``encrypted_content`` of a compaction item holding ``summary``."""
    return _MARKER + base64.b64encode(summary.encode()).decode()


def summary_message(encrypted: str | None, i: int) -> ChatMessage:
    """The chat message standing for compaction item ``input[i]``."""
    if encrypted is not None and encrypted.startswith(_MARKER):
        try:
            summary = base64.b64decode(encrypted[len(_MARKER) :], validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            summary = None
        if summary is not None:
            return ChatMessage(role="user", content=SUMMARY_HEADING + summary)
    raise InvalidRequestError(
        "This compaction item was not made by this gateway; its content cannot be read.",
        param=f"input[{i}].encrypted_content",
    )
