"""Request and answer bodies as JSON: compact UTF-8 out, and upstream JSON that does not
parse reported as the upstream's failure."""

from __future__ import annotations

import json
from typing import Any

from backends.http.errors import protocol_error
from gateway.protocol import jsonio


def encode_json(body: Any) -> bytes:
    """A request body as compact UTF-8 JSON."""
    return jsonio.encode(body)


def load_json(data: bytes | str, deployment: str) -> Any:
    """``json.loads`` that reports bad upstream JSON as an upstream failure."""
    try:
        return json.loads(data)
    except ValueError:
        raise protocol_error(deployment, "sent invalid JSON") from None
