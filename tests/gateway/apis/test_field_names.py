"""The field names a translation keeps: each chat path of a translated Responses or Messages
request, named as the request sent names it, and a refusal renamed once."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.apis.anthropic.translation import translate
from gateway.apis.responses.tools import tool_map
from gateway.apis.responses.translation import to_chat
from gateway.errors import ContextLengthExceededError, InvalidRequestError
from gateway.protocol.fieldnames import FieldNames
from gateway.protocol.messages import MessagesRequest
from gateway.protocol.responses import ResponsesRequest

SCHEMA = {"type": "object", "properties": {}}


def responses_names(body: dict[str, Any], history: int = 0) -> FieldNames:
    request = ResponsesRequest.model_validate({"model": "m", **body})
    tools = tool_map(request.tools, request.input, "drop")
    stored = [{"role": "user", "content": "before"}] * history
    return to_chat(request, stored, tools)[2]


RESPONSES = {
    "instructions": "be brief",
    "input": [
        {"role": "assistant", "content": [{"type": "output_text", "text": "calling"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "custom_tool_call", "call_id": "c2", "name": "g", "input": "x"},
        {"type": "reasoning"},
        {"type": "function_call_output", "call_id": "c1", "output": "1"},
        {
            "type": "additional_tools",
            "tools": [{"type": "function", "name": "late", "parameters": SCHEMA}],
        },
        {"role": "user", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]},
    ],
    "tools": [
        {"type": "web_search"},
        {"type": "namespace", "name": "ns", "tools": [{"type": "function", "name": "f"}]},
        {"type": "function", "name": "f", "parameters": SCHEMA},
        {"type": "custom", "name": "g"},
    ],
}


@pytest.mark.parametrize(
    ("chat", "named"),
    [
        ("messages[0].content", "instructions"),
        ("messages[1]", "previous_response_id"),
        ("messages[2].content[0].text", "input[0].content[0].text"),
        ("messages[2].tool_calls[0].id", "input[1].call_id"),
        ("messages[2].tool_calls[1].function.arguments", "input[2].input"),
        ("messages[2].tool_calls[1].type", "input[2]"),
        ("messages[3].content", "input[4].output"),
        ("messages[4].content[0].image_url.url", "input[6].content[0].image_url"),
        ("messages[4].content[0].image_url.detail", "input[6].content[0].detail"),
        ("messages[5]", "input"),
        ("tools[0].function.parameters", "tools[1].tools[0].parameters"),
        ("tools[1].function.parameters.properties", "tools[2].parameters.properties"),
        ("tools[2].function.parameters", "tools[3]"),
        ("tools[3].function.name", "input[5].tools[0].name"),
        ("tools[7]", "tools"),
        ("response_format.json_schema.schema.type", "text.format.schema.type"),
        ("reasoning_effort", "reasoning.effort"),
        ("max_completion_tokens", "max_output_tokens"),
        ("stop[1]", "stop[1]"),
        ("tool_choice.function.name", "tool_choice.name"),
        ("logprobs", None),
    ],
)
def test_a_responses_requests_chat_paths_name_its_own_fields(chat: str, named: str) -> None:
    body = {**RESPONSES, "previous_response_id": "resp_1"}
    assert responses_names(body, history=1).name(chat) == named


def test_a_string_input_and_a_conversation_are_named_whole() -> None:
    names = responses_names({"input": "hi", "conversation": "conv_1"}, history=2)
    assert [names.name(f"messages[{i}].content") for i in range(3)] == [
        "conversation",
        "conversation",
        "input",
    ]


MESSAGES = {
    "model": "m",
    "max_tokens": 8,
    "system": [{"type": "text", "text": "be brief"}],
    "messages": [
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hm"},
                {"type": "tool_use", "id": "t1", "name": "f", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "see"},
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [
                        {"type": "text", "text": "it"},
                        {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
                    ],
                },
                {"type": "image", "source": {"type": "url", "url": "https://x/z.png"}},
            ],
        },
    ],
    "tools": [
        {"type": "web_search_20250305", "name": "web_search"},
        {"name": "f", "input_schema": SCHEMA},
    ],
    "stop_sequences": ["END"],
}


@pytest.mark.parametrize(
    ("chat", "named"),
    [
        ("messages[0].content", "system"),
        ("messages[1].tool_calls[0].function.arguments", "messages[0].content[1].input"),
        ("messages[2].tool_call_id", "messages[1].content[1].tool_use_id"),
        ("messages[3].content[0].image_url.url", "messages[1].content[1].content[1].source"),
        ("messages[4].content[0].text", "messages[1].content[0].text"),
        ("messages[4].content[1].type", "messages[1].content[2].type"),
        ("tools[0].function.parameters.type", "tools[1].input_schema.type"),
        ("tools[0].function.name", "tools[1].name"),
        ("stop[0]", "stop_sequences[0]"),
        ("parallel_tool_calls", "tool_choice.disable_parallel_tool_use"),
        ("response_format.json_schema.schema", "output_config.format.schema"),
        ("prompt_cache_key", None),
    ],
)
def test_a_messages_requests_chat_paths_name_its_own_fields(chat: str, named: str) -> None:
    request = MessagesRequest.model_validate(MESSAGES)
    names = translate(request, drops=frozenset({"server_tools"})).names
    assert names.name(chat) == named


def test_a_refusal_is_renamed_once_message_and_all() -> None:
    request = ResponsesRequest.model_validate({"model": "m", **RESPONSES})
    names = to_chat(request, [], tool_map(request.tools, request.input, "drop"))[2]
    refused = InvalidRequestError(
        "Invalid 'messages[2].content'. messages[2].content.x and messages[2].contents stay.",
        param="messages[2].content",
    )
    names.rename(refused)
    names.rename(refused)  # a second look at the same failure changes nothing
    assert refused.param == "input[4].output"
    assert refused.message == (
        "Invalid 'input[4].output'. messages[2].content.x and messages[2].contents stay."
    )
    overflow = ContextLengthExceededError("too long")
    names.rename(overflow)
    assert overflow.param == "input"
    named_already = InvalidRequestError("bad", param="tools[0].type")
    named_already.param_named = True
    names.rename(named_already)
    assert named_already.param == "tools[0].type"
