"""The chat ``prompt_cache_key`` a translated Messages request with cache breakpoints
carries."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from gateway.protocol import ChatMessage


def prompt_cache_key(first: ChatMessage, tools: list[dict[str, Any]] | None) -> str:
    """The chat ``prompt_cache_key`` for a request with cache breakpoints: a digest of
    what such clients keep the same from turn to turn (the first message and the tools),
    so that an upstream that routes by the key (OpenAI's) finds the cached prefix."""
    digest = hashlib.sha256(first.model_dump_json().encode())
    digest.update(json.dumps(tools or [], sort_keys=True).encode())
    return f"shunter-{digest.hexdigest()[:32]}"
