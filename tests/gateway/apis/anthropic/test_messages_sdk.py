"""``/v1/messages`` with the official anthropic SDK against a real `shunter serve`: on the tiny
GGUF (translated to chat, run by llama.cpp), on a loopback Anthropic-wire upstream (passed
through untouched) and on a loopback OpenAI-wire upstream (translated)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from anthropic import Anthropic
from openai import OpenAI

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.anthropic_upstream import AnthropicUpstream
from tests.fixtures.fault_upstream import FaultUpstream

MASTER = "sk-master-messages"
GREEDY = {"temperature": 0}  # (this SDK sends sampling settings as extra body fields)
HI: Any = [{"role": "user", "content": "Weather in Paris?"}]
WEATHER: Any = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


@pytest.fixture(scope="module")
def upstream() -> Iterator[AnthropicUpstream]:
    with AnthropicUpstream() as server:
        yield server


@pytest.fixture(scope="module")
def openai_upstream() -> Iterator[FaultUpstream]:
    with FaultUpstream() as server:
        yield server


@pytest.fixture(scope="module")
def server(
    tiny_model: Path,
    upstream: AnthropicUpstream,
    openai_upstream: FaultUpstream,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("messages")
    anthropic_wire = f"backend: anthropic, base_url: '{upstream.url}', api_key_env: UP_KEY"
    (folder / "config.yaml").write_text(
        "reliability: {retries: 0}\n"
        "deployments:\n"
        f"  - {{name: gen, backend: llamacpp, model: {tiny_model}, n_ctx: 2048, threads: 1,"
        " parallel: 2}\n"
        f"  - {{name: claude, {anthropic_wire}, model: claude-up}}\n"
        f"  - {{name: busy, {anthropic_wire}, model: overloaded}}\n"
        f"  - {{name: breaks, {anthropic_wire}, model: midstream-error}}\n"
        f"  - {{name: oai, backend: openai, base_url: '{openai_upstream.url}', model: fake}}\n"
        "models:\n"
        "  tiny: {candidates: [gen]}\n"
        "  claude: {candidates: [claude]}\n"
        "  busy: {candidates: [busy], fallback: false}\n"
        "  breaks: {candidates: [breaks]}\n"
        "  oai: {candidates: [oai]}\n"
    )
    env = {"SHUNTER_MASTER_KEY": MASTER, "UP_KEY": "sk-upstream"}
    server = start_server(folder / "config.yaml", folder / "server.log", env=env)
    yield server
    stop_server(server)


@pytest.fixture(scope="module")
def client(server: Server) -> Iterator[Anthropic]:
    with Anthropic(base_url=server.base_url, api_key=MASTER, max_retries=0, timeout=120) as sdk:
        yield sdk


# --- the tiny model through llama.cpp ---------------------------------------------------


def test_create_and_stream_on_a_local_model(client: Anthropic) -> None:
    message = client.messages.create(
        model="tiny", max_tokens=6, system="Be brief.", messages=HI, extra_body=GREEDY
    )
    assert message.type == "message" and message.role == "assistant"
    assert message.stop_reason == "max_tokens"
    assert message.content[0].type == "text" and message.content[0].text
    assert message.usage.output_tokens >= 6
    with client.messages.stream(
        model="tiny", max_tokens=6, system="Be brief.", messages=HI, extra_body=GREEDY
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert {"content_block_start", "content_block_delta", "content_block_stop"} <= set(kinds)
    assert final.stop_reason == "max_tokens"
    assert final.content[0].type == "text"
    assert final.content[0].text == message.content[0].text  # temperature 0: the same text
    assert final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0) > 0


@pytest.mark.parametrize(
    "choice", [{"type": "tool", "name": "get_weather"}, {"type": "any"}], ids=["tool", "any"]
)
def test_forced_tool_use_then_the_result(client: Anthropic, choice: Any) -> None:
    args: Any = {
        "model": "tiny",
        "max_tokens": 100,
        "messages": HI,
        "tools": [WEATHER],
        "tool_choice": choice,
        "extra_body": GREEDY,
    }
    message = client.messages.create(**args)
    assert message.stop_reason == "tool_use"
    use = next(block for block in message.content if block.type == "tool_use")
    assert use.name == "get_weather" and use.input in ({"city": "Paris"}, {"city": "Oslo"})
    with client.messages.stream(**args) as stream:
        final = stream.get_final_message()
    streamed = next(block for block in final.content if block.type == "tool_use")
    assert streamed.input == use.input and final.stop_reason == "tool_use"
    answer = client.messages.create(
        model="tiny",
        max_tokens=4,
        tools=[WEATHER],
        messages=[
            *HI,
            {"role": "assistant", "content": [use.model_dump()]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "Sunny"}],
            },
        ],
    )
    assert answer.stop_reason in ("max_tokens", "end_turn", "tool_use")


def test_count_tokens_is_exact_on_a_local_model(client: Anthropic) -> None:
    raw = client.messages.with_raw_response.count_tokens(
        model="tiny", system="Be brief.", messages=HI, tools=[WEATHER]
    )
    assert raw.headers["x-shunter-token-count"] == "exact"
    counted = raw.parse().input_tokens
    used = client.messages.create(
        model="tiny", max_tokens=1, system="Be brief.", messages=HI, tools=[WEATHER]
    ).usage
    assert counted == used.input_tokens + (used.cache_read_input_tokens or 0)


def test_errors_raise_the_sdks_typed_exceptions(server: Server, client: Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as missing:
        client.messages.create(model="nope", max_tokens=4, messages=HI)
    assert missing.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    with (
        Anthropic(base_url=server.base_url, api_key="sk-wrong", max_retries=0) as stranger,
        pytest.raises(anthropic.AuthenticationError),
    ):
        stranger.messages.create(model="tiny", max_tokens=4, messages=HI)
    with pytest.raises(anthropic.BadRequestError) as bad:
        client.messages.create(
            model="tiny", max_tokens=4, messages=HI, extra_body={"temperature": 1.5}
        )
    assert bad.value.body["type"] == "error"  # type: ignore[index]
    # Anthropic's own shape and header, and a Bearer token works as well as x-api-key
    answer = httpx.post(
        f"{server.api}/messages",
        json={"model": "tiny", "messages": HI},
        headers={"authorization": f"Bearer {MASTER}", "anthropic-version": "2023-06-01"},
    )
    assert answer.status_code == 400
    assert answer.json()["error"] == {
        "type": "invalid_request_error",
        "message": "Missing required parameter: 'max_tokens'.",
    }
    assert answer.json()["request_id"] == answer.headers["x-request-id"]
    assert httpx.post(f"{server.api}/messages", json={}).json()["error"]["type"] == (
        "authentication_error"
    )


# --- an Anthropic-wire upstream: passed through ------------------------------------------


def test_requests_pass_through_to_an_anthropic_upstream(
    client: Anthropic, upstream: AnthropicUpstream
) -> None:
    sent: Any = {
        "max_tokens": 50,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "stop_sequences": ["world"],
        "metadata": {"user_id": "u1"},
    }
    raw = client.messages.with_raw_response.create(model="claude", **sent, extra_body={"top_k": 5})
    message = raw.parse()
    assert raw.headers["x-shunter-deployment"] == "claude"
    assert message.id == "msg_upstream" and message.model == "claude-up"
    assert message.stop_reason == "stop_sequence" and message.stop_sequence == "world"
    assert message.usage.cache_read_input_tokens == 3
    seen = upstream.last()
    # as the client wrote it, only the model replaced
    assert seen.body == {"model": "claude-up", **sent, "top_k": 5}
    assert seen.headers["x-api-key"] == "sk-upstream"

    with client.messages.stream(
        model="claude", max_tokens=50, messages=HI, tools=[WEATHER], tool_choice={"type": "any"}
    ) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use" and final.model == "claude-up"
    use = final.content[0]
    assert use.type == "tool_use" and use.input == {"city": "Paris"}
    assert upstream.last().body["stream"] is True

    follow = client.messages.create(
        model="claude",
        max_tokens=50,
        messages=[
            *HI,
            {"role": "assistant", "content": [use.model_dump(exclude_none=True)]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "Sunny"}],
            },
        ],
    )
    assert follow.content[0].type == "text" and follow.content[0].text == "The tool said: Sunny"

    raw_count = client.messages.with_raw_response.count_tokens(model="claude", messages=HI)
    assert raw_count.parse().input_tokens == 42
    assert raw_count.headers["x-shunter-token-count"] == "upstream"
    assert "max_tokens" not in upstream.last("/v1/messages/count_tokens").body


def test_upstream_failures_keep_anthropics_shape(client: Anthropic) -> None:
    with pytest.raises(anthropic.APIStatusError) as busy:
        client.messages.create(model="busy", max_tokens=5, messages=HI)
    assert busy.value.status_code == 529
    assert busy.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
    with (
        pytest.raises(anthropic.APIStatusError) as broken,
        client.messages.stream(model="breaks", max_tokens=5, messages=HI) as stream,
    ):
        for _ in stream:
            pass
    assert "boom" in str(broken.value) or broken.value.body


def test_midstream_errors_are_error_events(server: Server) -> None:
    answer = httpx.post(
        f"{server.api}/messages",
        json={"model": "breaks", "max_tokens": 5, "messages": HI, "stream": True},
        headers={"x-api-key": MASTER},
        timeout=30,
    )
    assert answer.status_code == 200
    events = [
        line.removeprefix("event: ")
        for line in answer.text.splitlines()
        if line.startswith("event: ")
    ]
    assert events[0] == "message_start" and events[-1] == "error"
    last = json.loads(answer.text.strip().splitlines()[-1].removeprefix("data: "))
    assert last["type"] == "error" and last["error"]["type"] == "api_error"


# --- an OpenAI-wire upstream: translated ------------------------------------------------


def test_an_openai_upstream_answers_messages_and_responses(
    server: Server, client: Anthropic
) -> None:
    message = client.messages.create(model="oai", max_tokens=50, messages=HI)
    assert message.stop_reason == "end_turn"
    assert message.content[0].type == "text" and message.content[0].text.startswith("word0 ")
    assert message.usage.output_tokens == 20
    with client.messages.stream(model="oai", max_tokens=50, messages=HI) as stream:
        streamed = stream.get_final_message()
    assert (
        streamed.content[0].type == "text" and streamed.content[0].text == message.content[0].text
    )
    assert streamed.stop_reason == "end_turn" and streamed.usage.output_tokens == 20
    with OpenAI(base_url=server.api, api_key=MASTER, max_retries=0) as sdk:
        response = sdk.responses.create(model="claude", input="hi")
        assert response.output_text == "Hello from upstream"  # Responses → chat → Messages
        with sdk.responses.stream(model="oai", input="hi") as events:
            final = events.get_final_response()
    assert final.output_text == message.content[0].text and final.status == "completed"


def test_a_system_turn_mid_conversation_reaches_a_local_model(client: Anthropic) -> None:
    # as Claude Code sends it (beta mid-conversation-system): a system turn after the user's
    messages: Any = [*HI, {"role": "system", "content": "Answer in French."}]
    message = client.messages.create(
        model="tiny", max_tokens=4, messages=messages, extra_body=GREEDY
    )
    assert message.content[0].type == "text" and message.usage.output_tokens >= 1


def test_a_large_count_leaves_liveness_answering(server: Server) -> None:
    """Counting a prompt of ~9 MB on the local model takes seconds; liveness is answered
    while it runs, not after it."""
    body = {"model": "tiny", "messages": [{"role": "user", "content": "word " * 1_800_000}]}
    data = json.dumps(body).encode()
    host, port = server.base_url.rsplit("//", 1)[1].rsplit(":", 1)
    head = (
        f"POST /v1/messages/count_tokens HTTP/1.1\r\nhost: {host}\r\nx-api-key: {MASTER}\r\n"
        "anthropic-version: 2023-06-01\r\ncontent-type: application/json\r\n"
        f"content-length: {len(data)}\r\nconnection: close\r\n\r\n"
    ).encode()
    with socket.create_connection((host, int(port)), timeout=120) as counting:
        counting.sendall(head + data)
        time.sleep(0.5)  # the body is read and the count under way
        alive = httpx.get(f"{server.base_url}/health/liveness", timeout=120)
        assert alive.status_code == 200
        counting.setblocking(False)
        with pytest.raises(BlockingIOError):  # the count has not answered yet
            counting.recv(1)
        counting.setblocking(True)
        assert counting.recv(12) == b"HTTP/1.1 200"
