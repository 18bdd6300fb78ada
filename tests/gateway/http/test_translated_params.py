"""A refusal of a Responses or Messages request names the field as that API names it,
whatever refused it after the request became a chat request: the in-process llama.cpp
engine (a tool schema it cannot constrain to), routing (an image no deployment reads, a
prompt past every context), or an OpenAI-compatible upstream's 400 naming a chat ``param``
(a scripted upstream on loopback). On a real ``shunter serve``; Messages errors carry no
``param`` and name the field at the start of their message."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets.sync.client

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.fault_upstream import FaultUpstream

IMAGE = "data:image/png;base64,iVBORw0KGgo="
LONG = "word " * 3000
OK_TOOL = {"type": "object", "properties": {"x": {"type": "string"}}}
NOT_AN_OBJECT = {"type": "string"}


@pytest.fixture(scope="module")
def upstream() -> Iterator[FaultUpstream]:
    with FaultUpstream() as fault:
        yield fault


@pytest.fixture(scope="module")
def gateway(
    tiny_model: Path, upstream: FaultUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("translated-params")
    config = folder / "shunter.yaml"
    config.write_text(
        f"""
deployments:
  - name: tiny-local
    backend: llamacpp
    model: {tiny_model}
    n_ctx: 1024
    threads: 1
    messages_drop: [metadata, server_tools]
  - name: up
    backend: openai
    base_url: '{upstream.url}'
    model: up
models:
  tiny: {{candidates: [tiny-local]}}
  m: {{candidates: [up]}}
"""
    )
    server = start_server(config, folder / "server.log")
    try:
        yield server
    finally:
        stop_server(server)


def responses_error(server: Server, body: dict[str, Any]) -> dict[str, Any]:
    answer = httpx.post(f"{server.api}/responses", json=body, timeout=60)
    assert answer.status_code == 400, answer.text
    error: dict[str, Any] = answer.json()["error"]
    return error


def messages_error(server: Server, body: dict[str, Any]) -> str:
    answer = httpx.post(f"{server.api}/messages", json=body, timeout=60)
    assert answer.status_code == 400, answer.text
    said = answer.json()
    assert said["type"] == "error" and said["error"]["type"] == "invalid_request_error"
    message: str = said["error"]["message"]
    return message


def refused_upstream(upstream: FaultUpstream, chat_param: str) -> None:
    """The upstream's next answer: a 400 naming ``chat_param`` of the chat request."""
    upstream.queue.clear()
    upstream.queue.append(f"400,param:{chat_param}")


# --- Responses ------------------------------------------------------------------------------

# chat: [system (instructions), user (input[0]), assistant (input[1]), user (input[2])]
WITH_AN_IMAGE = {
    "instructions": "be brief",
    "input": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "what is this?"},
                {"type": "input_image", "image_url": IMAGE},
            ],
        },
    ],
}
# chat: [assistant with tool_calls (input[0], input[1]), tool (input[2]), tool (input[3]),
#        user (input[4])]
AFTER_TWO_CALLS = {
    "input": [
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "1"},
        {"type": "function_call_output", "call_id": "c2", "output": "2"},
        {"role": "user", "content": [{"type": "input_text", "text": "go on"}]},
    ],
    "tools": [{"type": "function", "name": "f", "parameters": OK_TOOL}],
}


def test_an_image_no_deployment_reads_names_its_input_item(gateway: Server) -> None:
    error = responses_error(gateway, {"model": "tiny", **WITH_AN_IMAGE})
    assert error["param"] == "input[2].content[1]", error
    assert "'input[2].content[1]'" in error["message"]


@pytest.mark.parametrize(
    ("body", "chat_param", "param"),
    [
        (WITH_AN_IMAGE, "messages[3].content[1].type", "input[2].content[1].type"),
        (WITH_AN_IMAGE, "messages[3].content[1].image_url.url", "input[2].content[1].image_url"),
        (WITH_AN_IMAGE, "messages[1].content[0]", "input[0].content"),
        (WITH_AN_IMAGE, "messages[0].content", "instructions"),
        (AFTER_TWO_CALLS, "messages[1].content[0]", "input[2].output"),
        (AFTER_TWO_CALLS, "messages[0].tool_calls[1].function.arguments", "input[1].arguments"),
        (AFTER_TWO_CALLS, "messages[2].tool_call_id", "input[3].call_id"),
        (AFTER_TWO_CALLS, "messages[9]", "input"),
        (AFTER_TWO_CALLS, "tools[0].function.parameters", "tools[0].parameters"),
        (AFTER_TWO_CALLS, "max_tokens", "max_output_tokens"),
        (AFTER_TWO_CALLS, "n", None),
    ],
)
def test_an_upstreams_chat_param_is_named_as_responses_names_it(
    gateway: Server,
    upstream: FaultUpstream,
    body: dict[str, Any],
    chat_param: str,
    param: str | None,
) -> None:
    refused_upstream(upstream, chat_param)
    error = responses_error(gateway, {"model": "m", **body})
    assert error["param"] == param, error


def test_a_responses_prompt_past_the_context_names_input(gateway: Server) -> None:
    turns = [*WITH_AN_IMAGE["input"][:2], {"role": "user", "content": LONG}]
    body = {"model": "tiny", "instructions": "be brief", "input": turns}
    error = responses_error(gateway, body)
    assert error["code"] == "context_length_exceeded" and error["param"] == "input", error


def test_a_tool_schema_after_a_hosted_tool_names_its_own_index(gateway: Server) -> None:
    tools = [
        {"type": "web_search"},  # left out for the upstream: chat's tools start after it
        {"type": "function", "name": "fine", "parameters": OK_TOOL},
        {"type": "function", "name": "flat", "parameters": NOT_AN_OBJECT},
    ]
    body = {"model": "tiny", "input": "hi", "tools": tools, "tool_choice": "required"}
    error = responses_error(gateway, body)
    assert error["param"] == "tools[2].parameters", error


# --- Messages -------------------------------------------------------------------------------

# chat: [system, user (messages[0]), assistant (messages[1]: a call), tool (messages[2]'s
#        tool_result), user (the rest of messages[2]: text, image)]
CONVERSATION = {
    "max_tokens": 16,
    "system": "be brief",
    "messages": [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "let me look"},
                {"type": "tool_use", "id": "t1", "name": "f", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "42"},
                {"type": "text", "text": "and this?"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0K"},
                },
            ],
        },
    ],
    "tools": [{"name": "f", "input_schema": OK_TOOL}],
}


def test_an_image_no_deployment_reads_names_its_message_block(gateway: Server) -> None:
    message = messages_error(gateway, {"model": "tiny", **CONVERSATION})
    assert "'messages[2].content[2]'" in message, message


@pytest.mark.parametrize(
    ("chat_param", "field"),
    [
        ("messages[4].content[1].type", "messages[2].content[2].type"),
        ("messages[4].content[0]", "messages[2].content[1]"),
        ("messages[3].content", "messages[2].content[0].content"),
        ("messages[3].tool_call_id", "messages[2].content[0].tool_use_id"),
        ("messages[2].tool_calls[0].function.arguments", "messages[1].content[1].input"),
        ("messages[1].content[0]", "messages[0].content"),
        ("messages[0].content", "system"),
        ("tools[0].function.parameters", "tools[0].input_schema"),
        ("stop", "stop_sequences"),
    ],
)
def test_an_upstreams_chat_param_is_named_as_messages_names_it(
    gateway: Server, upstream: FaultUpstream, chat_param: str, field: str
) -> None:
    refused_upstream(upstream, chat_param)
    message = messages_error(gateway, {"model": "m", **CONVERSATION})
    assert message.startswith(f"{field}: "), message


def test_a_messages_prompt_past_the_context_is_worded_as_anthropic_words_it(
    gateway: Server,
) -> None:
    body = {**CONVERSATION, "model": "tiny", "messages": [{"role": "user", "content": LONG}]}
    message = messages_error(gateway, body)
    assert message.startswith("prompt is too long: "), message


def test_a_tool_schema_after_a_server_tool_names_its_input_schema(gateway: Server) -> None:
    tools = [
        {"type": "web_search_20250305", "name": "web_search"},  # dropped by the deployment
        {"name": "fine", "input_schema": OK_TOOL},
        {"name": "flat", "input_schema": NOT_AN_OBJECT},
    ]
    body = {
        "model": "tiny",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": tools,
        "tool_choice": {"type": "any"},
    }
    message = messages_error(gateway, body)
    assert message.startswith("tools[2].input_schema: "), message


def test_a_stream_refused_before_its_first_byte_is_named_the_same(
    gateway: Server, upstream: FaultUpstream
) -> None:
    refused_upstream(upstream, "messages[3].content[1].type")
    error = responses_error(gateway, {"model": "m", "stream": True, **WITH_AN_IMAGE})
    assert error["param"] == "input[2].content[1].type", error
    refused_upstream(upstream, "messages[4].content[1].type")
    message = messages_error(gateway, {"model": "m", "stream": True, **CONVERSATION})
    assert message.startswith("messages[2].content[2].type: "), message


def test_a_websocket_turn_refused_names_the_same_field(
    gateway: Server, upstream: FaultUpstream
) -> None:
    refused_upstream(upstream, "messages[3].content[1].type")
    url = gateway.base_url.replace("http://", "ws://") + "/v1/responses"
    with websockets.sync.client.connect(url) as socket:
        socket.send(json.dumps({"type": "response.create", "model": "m", **WITH_AN_IMAGE}))
        said = json.loads(socket.recv(timeout=30))
    assert said["type"] == "error" and said["status"] == 400, said
    assert said["error"]["param"] == "input[2].content[1].type", said
