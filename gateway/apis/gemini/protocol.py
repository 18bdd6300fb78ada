"""Google's Gemini API (``generativelanguage.googleapis.com/v1beta``) as typed models: the
request of ``generateContent`` / ``streamGenerateContent`` / ``countTokens`` and the
answer, with the fields the gateway reads typed and every other one kept (a native
upstream gets the body as sent; the translation refuses what it cannot map by name).

Fields are named as Google's JSON names them (camelCase); the snake_case names that
Google's servers also read are accepted too. A validation failure names the field in
camelCase (``contents[0].parts[1].inlineData``).
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field, JsonValue
from pydantic.alias_generators import to_camel

from gateway.protocol.common import RequestModel


class GeminiModel(RequestModel):
    """A request object: camelCase on the wire, snake_case read too, unknown fields kept."""

    model_config = ConfigDict(
        extra="allow",
        populate_by_name=True,
        strict=True,
        cache_strings="keys",
        alias_generator=to_camel,
    )


class Blob(GeminiModel):
    mime_type: str
    data: str


class FileData(GeminiModel):
    mime_type: str | None = None
    file_uri: str


class FunctionCall(GeminiModel):
    id: str | None = None
    name: str
    args: dict[str, JsonValue] | None = None


class FunctionResponse(GeminiModel):
    id: str | None = None
    name: str
    response: dict[str, JsonValue] | None = None


class Part(GeminiModel):
    text: str | None = None
    inline_data: Blob | None = None
    file_data: FileData | None = None
    function_call: FunctionCall | None = None
    function_response: FunctionResponse | None = None
    thought: bool | None = None
    thought_signature: str | None = None


class Content(GeminiModel):
    role: str | None = None
    parts: list[Part] = Field(default_factory=list)


class FunctionDeclaration(GeminiModel):
    name: str
    description: str | None = None
    parameters: dict[str, JsonValue] | None = None
    parameters_json_schema: JsonValue = None


class Tool(GeminiModel):
    function_declarations: list[FunctionDeclaration] | None = None


class FunctionCallingConfig(GeminiModel):
    mode: str | None = None
    allowed_function_names: list[str] | None = None


class ToolConfig(GeminiModel):
    function_calling_config: FunctionCallingConfig | None = None


class ThinkingConfig(GeminiModel):
    include_thoughts: bool | None = None
    thinking_budget: int | None = None
    thinking_level: str | None = None


class GenerationConfig(GeminiModel):
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=1)
    max_output_tokens: int | None = Field(default=None, ge=1)
    stop_sequences: list[str] | None = None
    candidate_count: int | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    response_mime_type: str | None = None
    response_schema: dict[str, JsonValue] | None = None
    response_json_schema: JsonValue = None
    response_modalities: list[str] | None = None
    thinking_config: ThinkingConfig | None = None


class GenerateContentRequest(GeminiModel):
    """A ``generateContent`` body (``model`` comes in the path; a token count's nested
    request names it)."""

    model: str | None = None
    contents: list[Content] = Field(min_length=1)
    system_instruction: Content | None = None
    tools: list[Tool] | None = None
    tool_config: ToolConfig | None = None
    generation_config: GenerationConfig | None = None
    safety_settings: list[JsonValue] | None = None
    cached_content: str | None = None

    def include_thoughts(self) -> bool:
        """Whether the answer shows the model's reasoning (``thought`` parts)."""
        config = self.generation_config
        thinking = config.thinking_config if config is not None else None
        return bool(thinking is not None and thinking.include_thoughts)


class CountTokensRequest(GeminiModel):
    """A ``countTokens`` body: ``contents``, or a whole ``generateContentRequest``."""

    contents: list[Content] | None = None
    generate_content_request: GenerateContentRequest | None = None


def camel(path: str) -> str:
    """A snake_case field path in Google's camelCase (``generation_config.top_k`` →
    ``generationConfig.topK``)."""
    return ".".join(to_camel(part) if "_" in part else part for part in path.split("."))


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
