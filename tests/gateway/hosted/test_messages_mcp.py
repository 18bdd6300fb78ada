"""Anthropic's MCP connector (``mcp_servers``) on ``/v1/messages``, run by the gateway on
the tiny local model against real MCP servers, as the official Anthropic SDK sees it.

The gateway offers a server's tools to the model as ``<server>__<tool>``: ``tool_choice``
naming one forces the tiny model's first turn to call it (the llama.cpp engine's grammar
writes the call); its next turn answers as it will.
"""

from __future__ import annotations

from typing import Any

import httpx
from anthropic import Anthropic

from tests.conftest import Server

BETA = {"anthropic-beta": "mcp-client-2025-04-04"}
PID = {"type": "tool", "name": "local__pid"}


def _servers(allowed: list[str]) -> list[dict[str, Any]]:
    configuration = {"enabled": True, "allowed_tools": allowed}
    # named as configured: the gateway's own server (this URL is not used)
    return [
        {
            "type": "url",
            "url": "https://example.invalid/mcp",
            "name": "local",
            "tool_configuration": configuration,
        }
    ]


def _client(gateway: Server, key: str) -> Any:
    """The SDK's client (typed loosely: the tests read what the gateway wrote)."""
    return Anthropic(base_url=gateway.base_url, api_key=key, max_retries=0, timeout=120)


def test_a_forced_call_runs_and_the_model_answers(gateway: Server, keys: dict[str, str]) -> None:
    message = _client(gateway, keys["full"]).beta.messages.create(
        model="tiny",
        max_tokens=16,
        messages=[{"role": "user", "content": "What is the server's pid?"}],
        mcp_servers=_servers(["pid"]),
        tool_choice=PID,
        betas=["mcp-client-2025-04-04"],
    )
    kinds = [block.type for block in message.content]
    assert kinds[:2] == ["mcp_tool_use", "mcp_tool_result"], kinds
    use, result = message.content[0], message.content[1]
    assert use.type == "mcp_tool_use" and use.name == "pid" and use.server_name == "local"
    assert result.type == "mcp_tool_result" and result.tool_use_id == use.id
    assert not result.is_error
    text = result.content[0].text if isinstance(result.content, list) else result.content
    assert str(text).isdigit()
    assert kinds[-1] == "text"
    usage = message.usage
    read = usage.input_tokens + (usage.cache_read_input_tokens or 0)
    assert read > 2 * 100  # two model calls, summed


def test_the_stream_carries_the_blocks(gateway: Server, keys: dict[str, str]) -> None:
    client = _client(gateway, keys["full"])
    with client.beta.messages.stream(
        model="tiny",
        max_tokens=16,
        messages=[{"role": "user", "content": "What is the server's pid?"}],
        mcp_servers=_servers(["pid"]),
        tool_choice=PID,
        betas=["mcp-client-2025-04-04"],
    ) as stream:
        events = [event.type for event in stream]
        message = stream.get_final_message()
    assert events.count("message_stop") == 1
    kinds = [block.type for block in message.content]
    assert kinds[:2] == ["mcp_tool_use", "mcp_tool_result"], kinds
    use = message.content[0]
    assert use.type == "mcp_tool_use" and use.input == {}
    assert kinds[-1] == "text"


def test_a_later_turn_reads_the_blocks_back(gateway: Server, keys: dict[str, str]) -> None:
    client = _client(gateway, keys["full"])
    first = client.beta.messages.create(
        model="tiny",
        max_tokens=8,
        messages=[{"role": "user", "content": "pid?"}],
        mcp_servers=_servers(["pid"]),
        tool_choice=PID,
        betas=["mcp-client-2025-04-04"],
    )
    assistant = [block.model_dump(exclude_none=True) for block in first.content]
    later = client.beta.messages.create(
        model="tiny",
        max_tokens=8,
        messages=[
            {"role": "user", "content": "pid?"},
            {"role": "assistant", "content": assistant},
            {"role": "user", "content": "Thanks."},
        ],
        mcp_servers=_servers(["pid"]),
        tool_choice={"type": "none"},
        betas=["mcp-client-2025-04-04"],
    )
    assert [block.type for block in later.content] == ["text"]


def test_a_request_server_is_refused_by_default(gateway: Server, keys: dict[str, str]) -> None:
    servers = [{"type": "url", "url": "https://mcp.example.com/mcp", "name": "theirs"}]
    answer = httpx.post(
        f"{gateway.api}/messages",
        json={
            "model": "tiny",
            "max_tokens": 4,
            "messages": [{"role": "user", "content": "hi"}],
            "mcp_servers": servers,
        },
        headers={"x-api-key": keys["full"], **BETA},
        timeout=60,
    )
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["type"] == "invalid_request_error" and "mcp_servers[0].url" in error["message"]


def test_a_key_without_the_server_is_refused(gateway: Server, keys: dict[str, str]) -> None:
    answer = httpx.post(
        f"{gateway.api}/messages",
        json={
            "model": "tiny",
            "max_tokens": 4,
            "messages": [{"role": "user", "content": "hi"}],
            "mcp_servers": _servers(["pid"]),
        },
        headers={"x-api-key": keys["narrow"], **BETA},
        timeout=60,
    )
    assert answer.status_code == 403, answer.text
    assert "local" in answer.json()["error"]["message"]


def test_web_search_runs_through_the_stand_in(gateway: Server, keys: dict[str, str]) -> None:
    message = _client(gateway, keys["full"]).messages.create(
        model="tiny",
        max_tokens=48,  # room for the query's 8 characters, token by token
        messages=[{"role": "user", "content": "Search for shunter"}],
        tools=[{"type": "web_search_20250305", "name": "web_search", "max_uses": 1}],
        tool_choice={"type": "tool", "name": "web_search"},
    )
    kinds = [block.type for block in message.content]
    assert kinds[:2] == ["mcp_tool_use", "mcp_tool_result"], kinds
    use = message.content[0]
    assert use.type == "mcp_tool_use" and use.server_name == "web" and use.name == "echo"
