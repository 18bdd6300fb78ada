"""A function call's id as the chat protocol carries it, with Gemini's thought signature.

Gemini 3 signs its reasoning: a ``functionCall`` part comes with a ``thoughtSignature``
(opaque base64) that must go back with that call on the next turn, or the request is
refused. Chat, Responses and Messages clients all send a tool call's id back unchanged
(``tool_calls[].id``, ``call_id``, ``tool_use.id``) while most drop fields they do not
know, so the signature travels inside the id:

* ``<id>__gs_<sig>``: a canonical base64 signature with ``+/`` read as ``-_`` and the
  padding left off (restored from the length);
* ``<id>__gx_<b64url>``: any other signature, as unpadded URL-safe base64 of its UTF-8.

Either way the id stays within ``[A-Za-z0-9_-]`` (what Messages allows in a ``tool_use``
id) when ``<id>`` does, and the signature comes back byte for byte. ``<id>`` is
Gemini's own call id, or one made here when it sent none. A tool call that carries
Google's OpenAI-compatible ``extra_content.google.thought_signature`` is read too.
"""

from __future__ import annotations

import base64
import binascii
import re
import uuid
from typing import Any

COMPACT = "__gs_"
ESCAPED = "__gx_"
_CANONICAL = re.compile(r"^[A-Za-z0-9+/]*={0,2}$")
_TO_URL = str.maketrans("+/", "-_")
_FROM_URL = str.maketrans("-_", "+/")


def new_call_id() -> str:
    """An id for a call Gemini sent without one."""
    return f"call_{uuid.uuid4().hex[:24]}"


def join(call_id: str, signature: str | None) -> str:
    """The chat tool call id for Gemini's ``call_id`` and its ``signature`` (if any)."""
    if not signature:
        return call_id
    if _CANONICAL.match(signature) and len(signature) % 4 == 0:
        return f"{call_id}{COMPACT}{signature.rstrip('=').translate(_TO_URL)}"
    packed = base64.urlsafe_b64encode(signature.encode()).decode().rstrip("=")
    return f"{call_id}{ESCAPED}{packed}"


def split(chat_id: str) -> tuple[str, str | None]:
    """Gemini's call id and thought signature in a chat tool call id (``None``: unsigned,
    or an id this backend did not write)."""
    for marker in (COMPACT, ESCAPED):
        base, found, packed = chat_id.partition(marker)
        if found and base:
            signature = _unpack(packed, compact=marker == COMPACT)
            if signature is not None:
                return base, signature
    return chat_id, None


def _unpack(packed: str, *, compact: bool) -> str | None:
    padded = packed + "=" * (-len(packed) % 4)
    if compact:
        return padded.translate(_FROM_URL)
    try:
        return base64.urlsafe_b64decode(padded).decode()
    except (binascii.Error, ValueError):
        return None


def extra_signature(extra: dict[str, Any] | None) -> str | None:
    """The signature of a tool call written the way Google's OpenAI-compatible endpoint
    writes it (``extra_content.google.thought_signature``)."""
    content = (extra or {}).get("extra_content")
    google = content.get("google") if isinstance(content, dict) else None
    signature = google.get("thought_signature") if isinstance(google, dict) else None
    return signature if isinstance(signature, str) and signature else None
