"""OpenTelemetry GenAI attributes read from what a request and its answer carried.

Only a gateway that records spans calls these: the request's sampling parameters come from
the request as the request path parsed it (never parsed again), and the answer's id, model
and finish reasons from the first and last bytes sent to the client (a stream's frames are
never parsed whole).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Mapping
from typing import Any

_HEAD_BYTES = 4096
_TAIL_BYTES = 2048
_TAIL_FRAMES = 4

# request field (any API) -> GenAI attribute; the first present wins
_NUMBERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("gen_ai.request.max_tokens", ("max_completion_tokens", "max_tokens", "max_output_tokens")),
    ("gen_ai.request.temperature", ("temperature",)),
    ("gen_ai.request.top_p", ("top_p",)),
    ("gen_ai.request.top_k", ("top_k",)),
    ("gen_ai.request.seed", ("seed",)),
    ("gen_ai.request.frequency_penalty", ("frequency_penalty",)),
    ("gen_ai.request.presence_penalty", ("presence_penalty",)),
)
_ID = re.compile(rb'"id"\s*:\s*"([^"\\]{1,128})"')
_MODEL = re.compile(rb'"model"\s*:\s*"([^"\\]{1,256})"')
_FINISH = re.compile(rb'"(?:finish_reason|stop_reason)"\s*:\s*"([A-Za-z_]{1,40})"')
_RESPONSE_STATUS = re.compile(
    rb'"type"\s*:\s*"response\.(completed|incomplete|failed)"|'
    rb'"object"\s*:\s*"response"[^{}]*?"status"\s*:\s*"(completed|incomplete|failed)"'
)


def request_attributes(parsed: Mapping[str, Any]) -> dict[str, Any]:
    """``gen_ai.request.*`` from a request's fields (chat, completions, Responses, Messages)."""
    out: dict[str, Any] = {}
    for attribute, fields in _NUMBERS:
        for field in fields:
            value = parsed.get(field)
            if isinstance(value, int | float) and not isinstance(value, bool):
                out[attribute] = value
                break
    stop = parsed.get("stop", parsed.get("stop_sequences"))
    if isinstance(stop, str):
        stop = [stop]
    if isinstance(stop, list) and stop and all(isinstance(s, str) for s in stop):
        out["gen_ai.request.stop_sequences"] = stop
    choices = parsed.get("n")
    if isinstance(choices, int) and not isinstance(choices, bool) and choices != 1:
        out["gen_ai.request.choice.count"] = choices
    return out


class AnswerBytes:
    """The start of an answer and the ends of its last frames: enough to read its id,
    model and finish reasons without holding (or parsing) the whole of it."""

    __slots__ = ("head", "tail")

    def __init__(self) -> None:
        self.head = b""
        self.tail: deque[bytes] = deque(maxlen=_TAIL_FRAMES)

    def add(self, body: bytes) -> None:
        if not body:
            return
        if len(self.head) < _HEAD_BYTES:
            self.head += body[: _HEAD_BYTES - len(self.head)]
        if len(body) > 2 * _TAIL_BYTES:  # a frame's start says what it is; its end, the rest
            body = body[:_TAIL_BYTES] + body[-_TAIL_BYTES:]
        self.tail.append(body)

    def attributes(self) -> dict[str, Any]:
        """``gen_ai.response.{id,model,finish_reasons}`` where the answer shows them."""
        out: dict[str, Any] = {}
        found_id = _ID.search(self.head)
        if found_id is not None:
            out["gen_ai.response.id"] = found_id.group(1).decode("utf-8", "replace")
        model = _MODEL.search(self.head)
        if model is not None:
            out["gen_ai.response.model"] = model.group(1).decode("utf-8", "replace")
        reasons = finish_reasons(b"".join(self.tail))
        if reasons:
            out["gen_ai.response.finish_reasons"] = reasons
        return out


def finish_reasons(tail: bytes) -> list[str]:
    """Finish reasons in the last bytes of an answer: OpenAI's ``finish_reason``,
    Anthropic's ``stop_reason``, or a Responses answer's final status."""
    found = [m.decode() for m in _FINISH.findall(tail)]
    if found:
        return found
    statuses = [a or b for a, b in _RESPONSE_STATUS.findall(tail)]
    return [statuses[-1].decode()] if statuses else []
