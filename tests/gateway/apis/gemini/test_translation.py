"""A Gemini request as the chat request a deployment gets: parts, ids, tools, tool choice,
schemas and settings map, or are refused naming the field as Gemini does; a lenient
translation (routing's) refuses nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.apis.gemini.protocol import GenerateContentRequest
from gateway.apis.gemini.schema import json_schema
from gateway.apis.gemini.translation import GeminiCall, Translated, translate
from gateway.errors import InvalidRequestError

PNG = {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}}
PDF = {"inlineData": {"mimeType": "application/pdf", "data": "JVBERi0="}}
WAV = {"inlineData": {"mimeType": "audio/wav", "data": "UklGRg=="}}
HI = [{"role": "user", "parts": [{"text": "hi"}]}]
TOOL = {"functionDeclarations": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}


def chat(body: dict[str, Any], **how: Any) -> Translated:
    return translate(GenerateContentRequest.model_validate(body), "m", **how)


def refused(body: dict[str, Any], **how: Any) -> str | None:
    with pytest.raises(InvalidRequestError) as refusal:
        chat(body, **how)
    return refusal.value.param


def test_media_parts_become_chat_parts() -> None:
    body = {"contents": [{"role": "user", "parts": [{"text": "look"}, PNG, WAV, PDF]}]}
    content = chat(body, files=True).chat.messages[0].content
    assert isinstance(content, list)
    assert [part.type for part in content] == ["text", "image_url", "input_audio", "file"]
    assert content[1].image_url and content[1].image_url.url == "data:image/png;base64,iVBORw0KGgo="
    assert refused(body) == "contents[0].parts[3].inlineData"  # a deployment without files


def test_thoughts_and_signatures_are_left_out_and_snake_case_is_read() -> None:
    body = {
        "contents": [
            *HI,
            {
                "role": "model",
                "parts": [
                    {"text": "pondering", "thought": True},
                    {"text": "Hel", "thought_signature": "c2ln"},
                    {"text": "lo."},
                ],
            },
        ],
        "generation_config": {"max_output_tokens": 9},
    }
    done = chat(body).chat
    assert done.messages[1].content == "Hello."
    assert done.max_tokens == 9


def test_call_ids_are_kept_or_made_and_answers_found_by_name() -> None:
    calls = [
        {"functionCall": {"name": "a", "args": {"x": 1}}},
        {"functionCall": {"name": "a", "args": {"x": 2}}},
        {"functionCall": {"id": "given", "name": "b"}},
    ]
    answers = [
        {"functionResponse": {"name": "b", "response": {"ok": True}}},
        {"functionResponse": {"name": "a", "response": {"n": 1}}},
        {"functionResponse": {"name": "a", "response": {"n": 2}}},
    ]
    body = {
        "contents": [*HI, {"role": "model", "parts": calls}, {"role": "user", "parts": answers}]
    }
    messages = chat(body).chat.messages
    made = [call.id for call in messages[1].tool_calls or []]
    assert made == ["call_1_0", "call_1_1", "given"]
    assert [m.tool_call_id for m in messages[2:]] == ["given", "call_1_0", "call_1_1"]
    stray = {"contents": [*HI, {"role": "user", "parts": [answers[0]]}]}
    assert refused(stray) == "contents[1].parts[0].functionResponse.name"


def test_tool_choice_modes() -> None:
    def choice(config: dict[str, Any]) -> Any:
        body = {"contents": HI, "tools": [TOOL], "toolConfig": {"functionCallingConfig": config}}
        done = chat(body).chat
        return done.tool_choice, [t.function.name for t in done.tools or []]

    assert choice({"mode": "AUTO"})[0] == "auto"
    assert choice({"mode": "NONE"})[0] == "none"
    assert choice({"mode": "ANY"}) == ("required", ["a", "b", "c"])
    assert choice({"mode": "ANY", "allowedFunctionNames": ["a", "c"]}) == ("required", ["a", "c"])
    body = {
        "contents": HI,
        "tools": [TOOL],
        "toolConfig": {"functionCallingConfig": {"mode": "SOMETIMES"}},
    }
    assert refused(body) == "toolConfig.functionCallingConfig.mode"


def test_thinking_settings_become_an_effort() -> None:
    def effort(thinking: dict[str, Any]) -> str | None:
        body = {"contents": HI, "generationConfig": {"thinkingConfig": thinking}}
        return chat(body).chat.reasoning_effort

    assert effort({"thinkingBudget": 0}) == "none"
    assert effort({"thinkingBudget": -1}) is None
    assert effort({"thinkingBudget": 8000}) == "medium"
    assert effort({"thinkingBudget": 30000}) == "high"
    assert effort({"thinkingLevel": "LOW"}) == "low"


def test_the_openapi_subset_becomes_json_schema() -> None:
    given = {
        "type": "OBJECT",
        "properties": {
            "tags": {"type": "ARRAY", "items": {"type": "STRING"}, "minItems": "1"},
            "when": {"anyOf": [{"type": "STRING"}, {"type": "INTEGER"}], "nullable": True},
        },
        "propertyOrdering": ["tags", "when"],
        "example": {"tags": ["a"]},
    }
    assert json_schema(given, "p") == {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "when": {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]},
        },
        "examples": [{"tags": ["a"]}],
    }
    with pytest.raises(InvalidRequestError) as bad:
        json_schema({"type": "OBJECT", "properties": {"a": {"type": "TEXT"}}}, "p")
    assert bad.value.param == "p.properties.a.type"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"contents": HI, "labels": {"a": "b"}}, "labels"),
        ({"contents": HI, "systemInstruction": {"parts": [PNG]}}, "systemInstruction.parts[0]"),
        ({"contents": [{"role": "tool", "parts": [{"text": "x"}]}]}, "contents[0].role"),
        (
            {"contents": [{"role": "user", "parts": [{"executableCode": {"code": "1"}}]}]},
            "contents[0].parts[0].executableCode",
        ),
        (
            {"contents": HI, "generationConfig": {"responseMimeType": "text/x.enum"}},
            "generationConfig.responseMimeType",
        ),
        (
            {"contents": HI, "generationConfig": {"responseModalities": ["IMAGE"]}},
            "generationConfig.responseModalities",
        ),
        (
            {"contents": HI, "generationConfig": {"speechConfig": {}}},
            "generationConfig.speechConfig",
        ),
        ({"contents": HI, "tools": [{"codeExecution": {}}]}, "tools[0].codeExecution"),
    ],
    ids=["labels", "system-image", "role", "code", "enum", "modalities", "speech", "hosted"],
)
def test_refusals_name_the_field(body: dict[str, Any], field: str) -> None:
    assert refused(body, hosted="refuse") == field
    routed = GeminiCall.read(json.dumps(body).encode(), "m").routed()  # routing still reads it
    assert routed.messages
