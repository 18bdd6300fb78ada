"""Between our protocol models and vLLM's OpenAI serving layer: request bodies out, its
JSON replies and SSE frames back in, and its errors onto :mod:`gateway.errors`.

vLLM's serving layer speaks the same OpenAI wire format, so a request goes over as its own
JSON body (with ``model`` set to what vLLM serves) and the reply is validated into our
models. ``None`` values are dropped first: vLLM serialises unset optionals as ``null``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final

from gateway.errors import (
    ContextLengthExceededError,
    GatewayError,
    InvalidRequestError,
    NotFoundError,
    RateLimitError,
    ServiceUnavailableError,
    UpstreamError,
    UpstreamTimeoutError,
)
from gateway.protocol import ChatCompletionRequest, CompletionRequest

DONE: Final = "[DONE]"
_FINISH_REASONS = frozenset({"stop", "length", "tool_calls", "content_filter", "function_call"})
_CONTEXT_PARAMS = frozenset({"input_tokens", "input_text"})
_CONTEXT_PHRASE = "maximum context length"


class VLLMErrorReply(Exception):
    """vLLM's serving layer answered with an error (its ``ErrorResponse`` as JSON)."""

    def __init__(self, body: dict[str, Any]) -> None:
        error = body.get("error") or {}
        super().__init__(str(error.get("message") or "vLLM error"))
        self.body = body
        self.status = int(error.get("code") or 500)
        self.message = str(error.get("message") or "vLLM error")
        self.error_type = str(error.get("type") or "")
        self.param: str | None = error.get("param")


def request_body(
    request: ChatCompletionRequest | CompletionRequest,
    *,
    model: str,
    request_id: str,
    stream: bool,
) -> dict[str, Any]:
    """The JSON body vLLM gets: the client's fields, our model name and request id, and
    usage always in streams (the contract's last chunk)."""
    body = request.model_dump(exclude_none=True, by_alias=True)
    body["model"] = model
    body["request_id"] = request_id
    body["stream"] = stream
    if stream:
        body["stream_options"] = {"include_usage": True}
    else:
        body.pop("stream_options", None)
    return body


def sse_events(frame: str) -> Iterator[dict[str, Any] | str]:
    """The ``data:`` payloads of SSE frames: decoded JSON, or ``DONE``."""
    for line in frame.splitlines():
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == DONE:
            yield DONE
        elif payload:
            data = json.loads(payload)
            if not isinstance(data, dict):
                raise UpstreamError(f"vLLM sent a non-object SSE payload: {payload[:200]}")
            yield data


def clean_reply(data: dict[str, Any], model: str) -> dict[str, Any]:
    """A vLLM reply ready for our models: errors raised, ``null`` dropped, finish reasons
    narrowed to OpenAI's, and ``model`` set to the name the client asked for."""
    if "error" in data and "choices" not in data:
        raise VLLMErrorReply(data)
    cleaned: dict[str, Any] = _drop_none(data)
    for choice in cleaned.get("choices", []):
        reason = choice.get("finish_reason")
        if reason is not None and reason not in _FINISH_REASONS:
            choice["finish_reason"] = _finish_reason(reason)
    cleaned["model"] = model
    return cleaned


def _finish_reason(reason: str) -> str:
    if reason == "abort":
        raise ServiceUnavailableError("vLLM aborted the request (engine stopping or preempted)")
    if reason == "error":
        raise UpstreamError("vLLM failed the request during generation", upstream_status=500)
    return "stop"  # "repetition" and future reasons: the model stopped


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def error_from_reply(
    reply: VLLMErrorReply, *, engine_dead: bool = False, prompt_param: str = "messages"
) -> GatewayError:
    """Our error for vLLM's ``ErrorResponse``, chosen by its HTTP status.

    vLLM gives context-length failures no code of their own: they are 400s whose
    ``param`` is ``input_tokens``/``input_text``, or (from ``get_max_tokens``) whose
    message says "maximum context length".
    """
    status, message, param = reply.status, reply.message, reply.param
    if status == 400:
        if param in _CONTEXT_PARAMS or _CONTEXT_PHRASE in message:
            return ContextLengthExceededError(message, param=prompt_param)
        return InvalidRequestError(message, param=param)
    if status in (404, 422, 501):
        kind = NotFoundError if status == 404 else InvalidRequestError
        return kind(message, param=param)
    if status == 429:
        return RateLimitError(message)
    if status == 503 or engine_dead:
        return ServiceUnavailableError(message if status == 503 else f"vLLM engine died: {message}")
    if status == 504:
        return UpstreamTimeoutError(message)
    body = json.dumps(reply.body)
    return UpstreamError(f"vLLM: {message}", upstream_status=status, upstream_body=body)


@contextmanager
def map_errors(
    is_dead: Callable[[], bool] | None = None, prompt_param: str = "messages"
) -> Iterator[None]:
    """Raise vLLM's failures as gateway errors. ``is_dead`` tells whether the engine
    died, which turns vLLM's 500 into a 503 (the deployment is down, not the request)."""
    try:
        yield
    except GatewayError:
        raise
    except VLLMErrorReply as reply:
        dead = bool(is_dead()) if is_dead is not None else False
        raise error_from_reply(reply, engine_dead=dead, prompt_param=prompt_param) from reply
    except json.JSONDecodeError as exc:
        raise UpstreamError(f"vLLM sent malformed JSON: {exc}") from exc
