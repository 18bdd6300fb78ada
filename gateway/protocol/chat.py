"""Chat completions: request, response and stream chunk, fields in OpenAI-doc order."""

from __future__ import annotations

from collections.abc import Container
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from gateway.protocol.common import (
    FinishReason,
    Omitted,
    RequestModel,
    ResponseModel,
    StreamOptions,
    Usage,
    missing,
    new_id,
    now,
)
from gateway.protocol.toolschema import ToolSchema


class ImageURL(RequestModel):
    url: str
    detail: Literal["auto", "low", "high"] | None = None


class ContentPart(RequestModel):
    type: str
    text: str | None = None
    image_url: ImageURL | None = None


class FunctionCall(RequestModel):
    name: str
    arguments: str


class ToolCall(RequestModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(RequestModel):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _tool_answer_names_its_call(self) -> ChatMessage:
        if self.role == "tool" and self.tool_call_id is None:
            raise missing("ChatMessage", "tool_call_id", self)
        return self

    def text(self) -> str:
        """The message's text, with image parts left out."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text or "" for part in self.content if part.type == "text")

    def has_images(self) -> bool:
        return isinstance(self.content, list) and any(p.type == "image_url" for p in self.content)


class FunctionDefinition(RequestModel):
    name: str
    description: str | None = None
    parameters: ToolSchema | None = None
    strict: bool | None = None


class Tool(RequestModel):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedFunction(RequestModel):
    name: str


class NamedToolChoice(RequestModel):
    type: Literal["function"] = "function"
    function: NamedFunction


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice


class JSONSchemaFormat(RequestModel):
    name: str = "response"
    description: str | None = None
    schema_: ToolSchema | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(RequestModel):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_present(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("response_format of type json_schema needs a json_schema object")
        return self


class ChatCompletionRequest(RequestModel):
    messages: list[ChatMessage] = Field(min_length=1)
    model: str
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    logit_bias: dict[str, float] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    max_tokens: int | None = Field(default=None, ge=1)
    n: int | None = Field(default=None, ge=1)
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    response_format: ResponseFormat | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    user: str | None = None
    reasoning_effort: str | None = None
    prompt_cache_key: str | None = None

    def output_limit(self) -> int | None:
        """``max_completion_tokens`` wins over the deprecated ``max_tokens``."""
        return self.max_completion_tokens or self.max_tokens

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def part_kinds(self) -> frozenset[str]:
        """The types of its content parts (``text``, ``image_url``, ``input_audio``...)."""
        return frozenset(
            part.type
            for message in self.messages
            if isinstance(message.content, list)
            for part in message.content
        )

    def first_part(self, kinds: Container[str], *, among: bool = True) -> tuple[str, str] | None:
        """The first content part whose type is in ``kinds`` (``among=False``: is not):
        its field (``messages[i].content[j]``) and its type."""
        for i, message in enumerate(self.messages):
            if isinstance(message.content, list):
                for j, part in enumerate(message.content):
                    if (part.type in kinds) is among:
                        return f"messages[{i}].content[{j}]", part.type
        return None

    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class AssistantMessage(ResponseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None = None
    refusal: str | None = None
    tool_calls: Omitted[list[ToolCall]] = None
    reasoning_content: Omitted[str] = None
    """The model's reasoning, as DeepSeek, vLLM and llama.cpp's server send it (an
    upstream's ``reasoning`` is read into it)."""


class ChatLogprobs(ResponseModel):
    """``choice.logprobs``: both lists are required keys, ``null`` when there is none."""

    content: list[Any] | None = None
    refusal: list[Any] | None = None


class Choice(ResponseModel):
    index: int = 0
    message: AssistantMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: FinishReason = "stop"

    @field_validator("finish_reason", mode="before")
    @classmethod
    def _stopped(cls, value: object) -> object:
        # a whole answer always says why it ended (no null in the schema): an upstream
        # that gave no reason stopped
        return "stop" if value is None else value


class ChatCompletion(ResponseModel):
    id: str = Field(default_factory=lambda: new_id("chatcmpl"))
    choices: list[Choice]
    created: int = Field(default_factory=now)
    model: str
    object: Literal["chat.completion"] = "chat.completion"
    system_fingerprint: Omitted[str] = None
    usage: Omitted[Usage] = None


class ToolCallDelta(ResponseModel):
    """A piece of a streamed tool call: ``id``, ``type`` and the name come with the first."""

    index: int
    id: Omitted[str] = None
    type: Omitted[Literal["function"]] = None
    function: Omitted[dict[str, str]] = None


class ChoiceDelta(ResponseModel):
    """A delta carries only what changed, as OpenAI sends it."""

    role: Omitted[Literal["assistant"]] = None
    content: Omitted[str] = None
    reasoning_content: Omitted[str] = None
    """A piece of the model's reasoning (see :attr:`AssistantMessage.reasoning_content`)."""
    tool_calls: Omitted[list[ToolCallDelta]] = None


class ChunkChoice(ResponseModel):
    index: int = 0
    delta: ChoiceDelta
    logprobs: ChatLogprobs | None = None
    finish_reason: FinishReason | None = None


class ChatCompletionChunk(ResponseModel):
    id: str
    choices: list[ChunkChoice]
    created: int
    model: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    system_fingerprint: Omitted[str] = None
    usage: Omitted[Usage] = None
