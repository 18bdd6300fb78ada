"""Server-sent events framing for OpenAI streams."""

from __future__ import annotations

import json

from pydantic import BaseModel

from gateway.errors import GatewayError

DONE = b"data: [DONE]\n\n"


def frame(chunk: BaseModel) -> bytes:
    return b"data: " + chunk.model_dump_json().encode() + b"\n\n"


def error_frame(error: GatewayError) -> bytes:
    """The in-band error OpenAI's SDK raises as ``APIError`` once a stream has begun."""
    return b"data: " + json.dumps(error.to_body()).encode() + b"\n\n"
