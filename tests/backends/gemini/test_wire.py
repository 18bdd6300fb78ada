"""The gemini backend's translation: chat requests into generateContent bodies (checked
against Google's published description), answers and stream events back, thought
signatures kept in tool call ids, and Google's error bodies through the error table."""

from __future__ import annotations

import json
from typing import Any

import pytest

from backends.gemini import calls
from backends.gemini.answer import chat_usage, from_response
from backends.gemini.settings import SKIP_SIGNATURE, GeminiSettings
from backends.gemini.stream import StreamTranslator
from backends.gemini.wire import to_generate_request
from backends.http.errors import counts_as_failure, error_for_status
from gateway.errors import (
    ContextLengthExceededError,
    InvalidRequestError,
    RateLimitError,
    UpstreamError,
)
from gateway.protocol import ChatCompletionRequest
from tests.backends.gemini.schema import problems

PNG = "iVBORw0KGgoAAAANSUhEUg=="
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


def settings(**fields: Any) -> GeminiSettings:
    return GeminiSettings.model_validate(
        {"name": "gem", "backend": "gemini", "model": "gemini-3-pro-preview", **fields}
    )


def body(messages: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    deployment = settings(**fields.pop("_settings", {}))
    request = ChatCompletionRequest.model_validate({"model": "m", "messages": messages, **fields})
    out = to_generate_request(request, deployment)
    assert problems(out) == []
    return out


CONVERSATION: Any = [
    {"role": "system", "content": "Be brief."},
    {"role": "developer", "content": "Answer in French."},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
            {"type": "image_url", "image_url": {"url": "https://x.example/cat.jpg"}},
            {"type": "input_audio", "input_audio": {"data": PNG, "format": "wav"}},
        ],
    },
    {"role": "assistant", "content": "A cat."},
    {"role": "user", "content": "Sure?"},
]


def test_the_request_maps_onto_generate_content() -> None:
    sent = body(
        CONVERSATION,
        temperature=0.2,
        top_p=0.9,
        max_completion_tokens=64,
        stop=["END"],
        seed=7,
        presence_penalty=0.5,
        top_k=40,
        reasoning_effort="low",
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "a", "schema": {"type": "object", "properties": {}}},
        },
    )
    assert sent["systemInstruction"] == {
        "parts": [{"text": "Be brief."}, {"text": "Answer in French."}]
    }
    assert [c["role"] for c in sent["contents"]] == ["user", "model", "user"]
    assert sent["contents"][0]["parts"] == [
        {"text": "What is this?"},
        {"inlineData": {"mimeType": "image/png", "data": PNG}},
        {"fileData": {"fileUri": "https://x.example/cat.jpg", "mimeType": "image/jpeg"}},
        {"inlineData": {"mimeType": "audio/wav", "data": PNG}},
    ]
    assert sent["generationConfig"] == {
        "temperature": 0.2,
        "topP": 0.9,
        "maxOutputTokens": 64,
        "seed": 7,
        "presencePenalty": 0.5,
        "stopSequences": ["END"],
        "responseMimeType": "application/json",
        "responseJsonSchema": {"type": "object", "properties": {}},
        "thinkingConfig": {"thinkingLevel": "low"},
        "topK": 40,
    }


@pytest.mark.parametrize(
    ("choice", "config"),
    [
        (None, None),
        ("auto", {"mode": "AUTO"}),
        ("required", {"mode": "ANY"}),
        ("none", {"mode": "NONE"}),
        (
            {"type": "function", "function": {"name": "get_weather"}},
            {"mode": "ANY", "allowedFunctionNames": ["get_weather"]},
        ),
    ],
)
def test_tools_and_tool_choice(choice: Any, config: Any) -> None:
    extra = {} if choice is None else {"tool_choice": choice}
    sent = body([{"role": "user", "content": "hi"}], tools=[WEATHER], **extra)
    function = WEATHER["function"]
    assert sent["tools"] == [
        {
            "functionDeclarations": [
                {
                    "name": "get_weather",
                    "description": "The weather in a city",
                    "parametersJsonSchema": function["parameters"],  # type: ignore[index]
                }
            ]
        }
    ]
    assert sent.get("toolConfig") == (None if config is None else {"functionCallingConfig": config})


def test_a_tool_round_trip_keeps_the_signature_and_names_the_response() -> None:
    signed = calls.join("fc_1", "CiQB+/x==")
    sent = body(
        [
            {"role": "user", "content": "Weather in Paris and Oslo?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": signed,
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    },
                    {
                        "id": "fc_2",
                        "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": signed, "content": '{"temp": 21}'},
            {"role": "tool", "tool_call_id": "fc_2", "content": "cold"},
        ],
        tools=[WEATHER],
    )
    model, answers = sent["contents"][1], sent["contents"][2]
    assert model == {
        "role": "model",
        "parts": [
            {
                "functionCall": {"name": "get_weather", "args": {"city": "Paris"}, "id": "fc_1"},
                "thoughtSignature": "CiQB+/x==",
            },
            {"functionCall": {"name": "get_weather", "args": {"city": "Oslo"}, "id": "fc_2"}},
        ],
    }
    assert answers == {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "get_weather", "response": {"temp": 21}, "id": "fc_1"}},
            {
                "functionResponse": {
                    "name": "get_weather",
                    "response": {"output": "cold"},
                    "id": "fc_2",
                }
            },
        ],
    }


def test_calls_from_elsewhere_get_the_documented_stand_in_signature() -> None:
    history: Any = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "tool_calls": [{"id": "toolu_01", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "toolu_01", "content": "ok"},
    ]
    part = body(history)["contents"][1]["parts"][0]
    assert part["thoughtSignature"] == SKIP_SIGNATURE
    none = body(history, _settings={"missing_signature": None, "call_ids": False})
    assert none["contents"][1]["parts"][0] == {"functionCall": {"name": "f", "args": {}}}
    assert "id" not in none["contents"][2]["parts"][0]["functionResponse"]


def test_google_compatible_extra_content_signature_is_read() -> None:
    call = {
        "id": "c1",
        "function": {"name": "f", "arguments": "{}"},
        "extra_content": {"google": {"thought_signature": "U2lnbg=="}},
    }
    sent = body([{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": [call]}])
    assert sent["contents"][1]["parts"][0]["thoughtSignature"] == "U2lnbg=="


@pytest.mark.parametrize(
    "signature",
    ["CiQBjz1rX+6nE/0pQm3kz7Vd5tHhJq9a1bYc2dEeFf3gGh4iIj5kLk==", "abc", "a+b=c", "x_y-z==", "=="],
)
def test_signatures_survive_the_call_id_byte_for_byte(signature: str) -> None:
    joined = calls.join("fc_9", signature)
    assert all(c.isalnum() or c in "_-" for c in joined)
    assert calls.split(joined) == ("fc_9", signature)
    assert calls.split("call_plain") == ("call_plain", None)


@pytest.mark.parametrize(
    ("effort", "models", "config"),
    [
        ("high", "gemini-3-pro-preview", {"thinkingLevel": "high"}),
        ("none", "gemini-3-flash-preview", {"thinkingLevel": "minimal"}),
        ("medium", "gemini-2.5-flash", {"thinkingBudget": 8192}),
        ("none", "models/gemini-2.5-flash", {"thinkingBudget": 0}),
        ("low", "gemini-flash-latest", {"thinkingBudget": 1024}),  # an alias: budgets
    ],
)
def test_reasoning_effort_becomes_thinking_config(
    effort: str, models: str, config: dict[str, Any]
) -> None:
    sent = body(
        [{"role": "user", "content": "hi"}], reasoning_effort=effort, _settings={"model": models}
    )
    assert sent["generationConfig"]["thinkingConfig"] == config


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"n": 2}, "n"),
        ({"logprobs": True}, "logprobs"),
        ({"reasoning_effort": "extreme"}, "reasoning_effort"),
        (
            {"messages": [{"role": "tool", "tool_call_id": "nope", "content": "x"}]},
            "messages[0].tool_call_id",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "ftp://x"}}],
                    }
                ]
            },
            "messages[0].content[0].image_url.url",
        ),
    ],
)
def test_what_gemini_cannot_take_is_refused_by_name(fields: dict[str, Any], param: str) -> None:
    messages = fields.pop("messages", [{"role": "user", "content": "hi"}])
    request = ChatCompletionRequest.model_validate({"model": "m", "messages": messages, **fields})
    with pytest.raises(InvalidRequestError) as caught:
        to_generate_request(request, settings())
    assert caught.value.param == param


def test_an_answer_with_thoughts_calls_and_usage() -> None:
    answer = {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [
                        {"text": "Planning.", "thought": True},
                        {"text": "Checking."},
                        {
                            "functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
                            "thoughtSignature": "U2ln",
                        },
                    ],
                },
                "finishReason": "STOP",
            }
        ],
        "usageMetadata": {
            "promptTokenCount": 100,
            "candidatesTokenCount": 20,
            "thoughtsTokenCount": 30,
            "cachedContentTokenCount": 60,
            "toolUsePromptTokenCount": 4,
        },
        "responseId": "r1",
    }
    result = from_response(answer, "public")
    message = result.choices[0].message
    assert result.id == "r1" and result.model == "public"
    assert message.content == "Checking." and message.reasoning_content == "Planning."
    assert result.choices[0].finish_reason == "tool_calls"
    (call,) = message.tool_calls or []
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert calls.split(call.id)[1] == "U2ln"
    usage = result.usage
    assert usage is not None and usage.prompt_tokens == 104 and usage.completion_tokens == 50
    assert (
        usage.prompt_tokens_details is not None and usage.prompt_tokens_details.cached_tokens == 60
    )
    assert usage.model_dump()["completion_tokens_details"] == {"reasoning_tokens": 30}


@pytest.mark.parametrize(
    ("reason", "finish"),
    [("MAX_TOKENS", "length"), ("SAFETY", "content_filter"), ("OTHER", "stop")],
)
def test_finish_reasons(reason: str, finish: str) -> None:
    answer = {"candidates": [{"content": {"parts": [{"text": "x"}]}, "finishReason": reason}]}
    assert from_response(answer, "m").choices[0].finish_reason == finish


def test_a_blocked_prompt_is_an_empty_filtered_answer() -> None:
    result = from_response({"promptFeedback": {"blockReason": "SAFETY"}}, "m")
    assert result.choices[0].finish_reason == "content_filter"
    assert result.choices[0].message.content == ""


def test_stream_events_become_chunks() -> None:
    translator = StreamTranslator("public")
    events: Any = [
        {
            "candidates": [{"content": {"parts": [{"text": "Hmm", "thought": True}]}}],
            "responseId": "r",
        },
        {"candidates": [{"content": {"parts": [{"text": "Hi "}]}}]},
        {
            "candidates": [
                {
                    "content": {
                        "parts": [{"functionCall": {"id": "a", "name": "f", "args": {"x": 1}}}]
                    },
                    "finishReason": "STOP",
                }
            ],
            "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 2},
        },
    ]
    chunks = [chunk for event in events for chunk in translator.feed(event)]
    deltas = [c.choices[0].delta for c in chunks]
    assert deltas[0].role == "assistant" and deltas[1].reasoning_content == "Hmm"
    assert deltas[2].content == "Hi "
    (call,) = deltas[3].tool_calls or []
    assert call.id == "a" and call.function == {"name": "f", "arguments": '{"x": 1}'}
    assert chunks[-1].choices[0].finish_reason == "tool_calls" and translator.finished
    assert all(c.id == "r" and c.model == "public" for c in chunks)
    final = translator.final()
    assert final.choices == [] and final.usage is not None and final.usage.total_tokens == 7


def google_error(status: int, kind: str, message: str, *details: dict[str, Any]) -> str:
    error = {"code": status, "message": message, "status": kind, "details": list(details)}
    return json.dumps({"error": error})


def test_google_errors_map_through_the_table() -> None:
    retry = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "12.5s"}
    limited = error_for_status(
        "g", 429, google_error(429, "RESOURCE_EXHAUSTED", "quota", retry), {}
    )
    assert isinstance(limited, RateLimitError) and limited.retry_after == 12.5
    headed = error_for_status("g", 429, google_error(429, "x", "q", retry), {"retry-after": "3"})
    assert headed.retry_after == 3.0  # the header wins
    info = {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}
    key = error_for_status(
        "g", 400, google_error(400, "INVALID_ARGUMENT", "API key not valid", info), {}
    )
    assert type(key) is UpstreamError and key.status_code == 502 and counts_as_failure(key)
    assert key.upstream_status == 400 and "API key not valid" not in key.message
    long = "The input token count (9) exceeds the maximum number of tokens allowed (8)."
    too_long = error_for_status("g", 400, google_error(400, "INVALID_ARGUMENT", long), {})
    assert isinstance(too_long, ContextLengthExceededError) and not counts_as_failure(too_long)


def test_usage_without_metadata_is_zero() -> None:
    usage = chat_usage(None)
    assert (usage.prompt_tokens, usage.completion_tokens) == (0, 0)


def test_the_description_refuses_what_google_would() -> None:
    wrong = {
        "contents": [{"role": "user", "parts": [{"text": "a", "inline_data": {}}]}],
        "generationConfig": {"maxOutputTokens": "many", "thinkingConfig": {"thinkingLevel": "low"}},
        "toolConfig": {"functionCallingConfig": {"mode": "SOMETIMES"}},
    }
    assert problems(wrong) == [
        "contents[0].parts[0].inline_data: no such field in Part",
        "generationConfig.maxOutputTokens: 'many' is not a int32",
        "toolConfig.functionCallingConfig.mode: 'SOMETIMES' is not a FunctionCallingConfig.Mode",
    ]
