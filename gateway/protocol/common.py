"""Pieces shared by the OpenAI protocol models.

Answers follow OpenAI's published response schemas: a key the schema requires is always
written (as ``null`` where it allows that), and an optional key whose schema has no ``null``
is left out while unset. :data:`Omitted` marks such fields; it is decided per field when
the model is serialised, so ``model_dump_json`` stays one pass in pydantic-core.
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError
from pydantic_core import InitErrorDetails

T = TypeVar("T")


def _unset(value: object) -> bool:
    return value is None


Omitted = Annotated[T | None, Field(exclude_if=_unset)]
"""An optional response field written only when set: its schema has no ``null``."""


class RequestModel(BaseModel):
    """Base of request bodies: unknown fields are kept (for pass-through) and never fail.

    Known fields are strict, as the published schemas type them: ``"16"`` is not an
    integer nor ``"yes"`` a boolean (a JSON integer is still a number)."""

    # cache_strings: pydantic-core keeps every short string it parses (values too) in a
    # process-wide cache of 16,384 entries, which the unique ids and texts of requests
    # fill at about 80 bytes a request, to 1-2 MB a process; keys repeat, values do not.
    # defer_build: a model's validator is built when it is first used, so a gateway whose
    # clients speak one API never holds the others' (about 1.5 MB of the idle footprint)
    model_config = ConfigDict(
        extra="allow", populate_by_name=True, strict=True, cache_strings="keys", defer_build=True
    )
    # unknown fields are any JSON, nested no deeper than pydantic's JSON parser reads
    # (a body of any size: the large-body decoder itself reads deeper)
    __pydantic_extra__: dict[str, JsonValue] = Field(init=False)


def missing(model: str, field: str, value: object) -> ValidationError:
    """The error of a field a request needs in this case though the schema types it as
    optional (a tool message's ``tool_call_id``): located at the field itself, so that the
    400 names it."""
    details = InitErrorDetails(type="missing", loc=(field,), input=value)
    return ValidationError.from_exception_data(model, [details])


class ResponseModel(BaseModel):
    model_config = ConfigDict(
        extra="allow", cache_strings="keys", defer_build=True
    )  # as RequestModel's


def new_id(prefix: str) -> str:
    """An id as OpenAI's chat and completions name theirs (``chatcmpl-...``)."""
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def item_id(prefix: str) -> str:
    """An id as Anthropic's messages and OpenAI's Responses objects name theirs
    (``msg_...``, ``toolu_...``, ``fc_...``): the prefix, then an underscore."""
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def now() -> int:
    return int(time.time())


class StreamOptions(RequestModel):
    include_usage: bool = False


class PromptTokensDetails(ResponseModel):
    cached_tokens: int = 0


class Usage(ResponseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    prompt_tokens_details: Omitted[PromptTokensDetails] = None
    server_tool_uses: dict[str, int] = Field(default_factory=dict, exclude=True)
    """Uses of each tool the upstream ran itself (Anthropic's ``server_tool_use``, as
    ``web_search``: 3): billed, never written out."""

    @classmethod
    def of(cls, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> Usage:
        details = PromptTokensDetails(cached_tokens=cached_tokens) if cached_tokens else None
        return cls(
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            total_tokens=prompt_tokens + completion_tokens,
            prompt_tokens_details=details,
        )


FinishReason = Literal["stop", "length", "tool_calls", "content_filter", "function_call"]


class Model(ResponseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = Field(default_factory=now)
    owned_by: str = "shunter"


class ModelList(ResponseModel):
    object: Literal["list"] = "list"
    data: list[Model]
