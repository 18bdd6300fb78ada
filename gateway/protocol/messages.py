"""Anthropic's Messages API: the request, the ``message`` answer and the error body.

Content blocks are one lenient model whose ``type`` says which fields matter (``text``,
``image``, ``tool_use``, ``tool_result``, ``thinking``, ``document``...), and unknown
fields are kept, so a request passed through to an Anthropic upstream is never refused
for what this gateway does not know, and the translation
(:mod:`gateway.apis.anthropic.translation`) names the offending field itself.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, JsonValue, field_validator

from gateway.errors import ContextLengthExceededError, GatewayError
from gateway.protocol.common import RequestModel, ResponseModel, item_id
from gateway.protocol.toolschema import ToolSchema

_SERVER_TOOL = re.compile(r"^([a-z][a-z0-9_]*)_(\d{8})$")
"""A server tool's type: its name and version date (``web_search_20250305``)."""
StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal"]


class ImageSource(RequestModel):
    type: Literal["base64", "url"]
    media_type: str | None = None
    data: str | None = None
    url: str | None = None


class Block(RequestModel):
    """One content block of a message (or of a ``tool_result``'s content)."""

    type: str
    text: str | None = None
    source: JsonValue = None
    id: str | None = None
    name: str | None = None
    input: dict[str, JsonValue] | None = None
    tool_use_id: str | None = None
    content: str | list[Block] | dict[str, JsonValue] | None = None
    is_error: bool | None = None
    thinking: str | None = None


class MessageParam(RequestModel):
    """A turn; ``system`` turns may come anywhere in the conversation (a mid-conversation
    system message)."""

    role: Literal["user", "assistant", "system"]
    content: str | list[Block]


class SystemBlock(RequestModel):
    type: Literal["text"] = "text"
    text: str


class ToolParam(RequestModel):
    """A client tool (no ``type``, or ``custom``), or one of Anthropic's server tools
    (``web_search_20250305``...), which only an Anthropic upstream runs."""

    name: str = Field(min_length=1)
    description: str | None = None
    input_schema: ToolSchema | None = None
    type: str | None = None


class ToolChoiceParam(RequestModel):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class Metadata(RequestModel):
    """``metadata``: ``user_id`` is a string or null, as Anthropic's ``MetadataParam``
    types it (a number is refused, never coerced)."""

    user_id: str | None = None


_NOT_NULL = ("temperature", "top_p", "top_k", "metadata")
"""Fields Anthropic types without ``Optional``: an explicit ``null`` is refused by name, as
Anthropic refuses it, rather than read as absent."""


class MessagesRequest(RequestModel):
    """``POST /v1/messages`` (and, without ``max_tokens``, ``count_tokens``)."""

    model: str
    max_tokens: int = Field(ge=1)
    messages: list[MessageParam]
    system: str | list[SystemBlock] | None = None
    tools: list[ToolParam] | None = None
    tool_choice: ToolChoiceParam | None = None
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=1.0)
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0)
    metadata: Metadata | None = None
    stream: bool | None = False
    thinking: dict[str, JsonValue] | None = None

    @field_validator(*_NOT_NULL, mode="before")
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        # runs only on a value the client sent: an absent field keeps its default
        if value is None:
            raise ValueError("null is not a valid value; send one, or leave the field out")
        return value

    def server_tools(self) -> dict[str, int | None]:
        """The upstream's own tools offered (``web_search_20250305`` → ``web_search``), with
        each one's ``max_uses`` (``None`` when not given)."""
        out: dict[str, int | None] = {}
        for tool in self.tools or []:
            versioned = _SERVER_TOOL.match(tool.type or "")
            if versioned is None:
                continue
            limit = (tool.model_extra or {}).get("max_uses")
            ok = isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0
            out[versioned.group(1)] = limit if ok else None
        return out

    def system_text(self) -> str:
        """``system`` as one text (its blocks joined by blank lines)."""
        if self.system is None or isinstance(self.system, str):
            return self.system or ""
        return "\n\n".join(block.text for block in self.system)


class CountTokensRequest(MessagesRequest):
    """``POST /v1/messages/count_tokens``: a Messages request without ``max_tokens``."""

    max_tokens: int = 1


# --- answers ----------------------------------------------------------------------------


class MessageUsage(ResponseModel):
    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0


class MessageResponse(ResponseModel):
    """The ``message`` answer: content blocks as dicts (``text`` / ``tool_use``)."""

    id: str = Field(default_factory=lambda: item_id("msg"))
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    model: str
    content: list[dict[str, Any]]
    stop_reason: StopReason | None
    stop_sequence: str | None = None
    usage: MessageUsage


ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}
"""Anthropic's error ``type`` for each HTTP status (docs.claude.com/en/api/errors)."""


def anthropic_status(status: int) -> int:
    """The status Anthropic would answer with: its 529 for overload, 500 for a bad upstream."""
    return {502: 500, 503: 529}.get(status, status)


def error_type(status: int) -> str:
    """Anthropic's error type for ``status``: 4xx not listed read as invalid requests."""
    known = ANTHROPIC_ERROR_TYPES.get(status)
    if known is not None:
        return known
    return "invalid_request_error" if status < 500 else "api_error"


def error_status(kind: str) -> int:
    """The status Anthropic answers an error ``type`` with (:func:`error_type`'s inverse,
    overload as its 529); unknown types read as 500."""
    for status, known in ANTHROPIC_ERROR_TYPES.items():
        if known == kind:
            return anthropic_status(status)
    return 500


def overflow_message(prompt_tokens: int, max_tokens: int, limit: int) -> str:
    """A context overflow in Anthropic's words, which its clients read back (Claude Code
    lowers ``max_tokens`` to fit and tries again)."""
    if prompt_tokens > limit:
        return f"prompt is too long: {prompt_tokens} tokens > {limit} maximum"
    return (
        f"input length and `max_tokens` exceed context limit: {prompt_tokens} + "
        f"{max_tokens} > {limit}, decrease input length or `max_tokens` and try again"
    )


def error_message(exc: GatewayError) -> str:
    """A refusal's message as the Messages API says it (its errors carry no ``param``): a
    context overflow in Anthropic's words where the figures are known, else led by the
    field it concerns (``tools[2].input_schema: ...``) unless it names that already."""
    if isinstance(exc, ContextLengthExceededError):
        if exc.limit is None:
            return exc.message
        return overflow_message(exc.prompt_tokens or 0, exc.max_tokens or 0, exc.limit)
    if exc.param and exc.param not in exc.message:
        return f"{exc.param}: {exc.message}"
    return exc.message


def error_body(status: int, message: str, request_id: str | None = None) -> dict[str, Any]:
    """Anthropic's error JSON: ``{"type": "error", "error": {type, message}, "request_id"}``."""
    body: dict[str, Any] = {
        "type": "error",
        "error": {"type": error_type(status), "message": message},
    }
    if request_id:
        body["request_id"] = request_id
    return body
