"""Legacy text completions: request, response and stream chunk."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from gateway.protocol.common import (
    FinishReason,
    Omitted,
    RequestModel,
    ResponseModel,
    StreamOptions,
    Usage,
    new_id,
    now,
)


class CompletionRequest(RequestModel):
    model: str
    prompt: str | list[str]
    best_of: int | None = Field(default=None, ge=1)
    echo: bool | None = False
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    logit_bias: dict[str, float] | None = None
    logprobs: int | None = Field(default=None, ge=0, le=5)
    max_tokens: int | None = Field(default=16, ge=1)
    n: int | None = Field(default=None, ge=1)
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    suffix: str | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    user: str | None = None

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class CompletionChoice(ResponseModel):
    """``finish_reason`` is ``null`` in stream chunks before the last, as OpenAI sends it
    (the published schema, shared by whole answers and chunks, lists no ``null``)."""

    text: str
    index: int = 0
    logprobs: Any | None = None
    finish_reason: FinishReason | None = None


class Completion(ResponseModel):
    id: str = Field(default_factory=lambda: new_id("cmpl"))
    choices: list[CompletionChoice]
    created: int = Field(default_factory=now)
    model: str
    object: Literal["text_completion"] = "text_completion"
    system_fingerprint: Omitted[str] = None
    usage: Omitted[Usage] = None
