"""MCP servers a request names by URL, where the operator allows them
(``hosted.request_servers``): the gateway connects to them for that request only, and the
request's own credentials go to them (and only to them)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.mcp_servers import HttpToolServer, http_tool_server


@pytest.fixture
def theirs() -> Iterator[HttpToolServer]:
    """A server of the test's own: what it saw is this test's requests only."""
    with http_tool_server() as server:
        yield server


@pytest.fixture(scope="module")
def open_gateway(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("request-servers")
    deployment = {"name": "tiny-local", "backend": "llamacpp", "model": str(tiny_model)}
    config = {
        "deployments": [{**deployment, "n_ctx": 4096, "threads": 1}],
        "models": {"tiny": {"candidates": ["tiny-local"]}},
        "hosted": {
            "request_servers": True,
            "request_server_timeout_s": 10,
            "max_result_chars": 4000,  # what the model reads of a result: it fits its context
        },
    }
    (folder / "shunter.yaml").write_text(json.dumps(config), encoding="utf-8")
    server = start_server(folder / "shunter.yaml", folder / "server.log")
    yield server
    stop_server(server)


def test_a_responses_request_server_gets_the_request_credentials(
    open_gateway: Server, theirs: HttpToolServer
) -> None:
    tool: dict[str, Any] = {
        "type": "mcp",
        "server_label": "theirs",
        "server_url": theirs.url,
        "authorization": "their-token",
        "headers": {"X-Their": "yes"},
        "require_approval": "never",
    }
    answer = httpx.post(
        f"{open_gateway.api}/responses",
        json={
            "model": "tiny",
            "input": "Which headers?",
            "max_output_tokens": 8,
            "tools": [tool],
            "tool_choice": {"type": "mcp", "server_label": "theirs", "name": "seen_headers"},
        },
        timeout=120,
    )
    assert answer.status_code == 200, answer.text
    output = answer.json()["output"]
    assert [item["type"] for item in output][:2] == ["mcp_list_tools", "mcp_call"]
    seen = output[1]["output"]  # the headers of the requests the MCP server received
    assert "Bearer their-token" in seen and '"x-their"' in seen
    echoed = answer.json()["tools"][0]  # the credentials are not said back
    assert "authorization" not in echoed and "headers" not in echoed


def test_a_messages_request_server_gets_its_authorization_token(
    open_gateway: Server, theirs: HttpToolServer
) -> None:
    server = {
        "type": "url",
        "url": theirs.url,
        "name": "theirs",
        "authorization_token": "anthropic-style-token",
        "tool_configuration": {"allowed_tools": ["seen_headers"]},
    }
    answer = httpx.post(
        f"{open_gateway.api}/messages",
        json={
            "model": "tiny",
            "max_tokens": 8,
            "messages": [{"role": "user", "content": "Which headers?"}],
            "mcp_servers": [server],
            "tool_choice": {"type": "tool", "name": "theirs__seen_headers"},
        },
        headers={"anthropic-beta": "mcp-client-2025-04-04"},
        timeout=120,
    )
    assert answer.status_code == 200, answer.text
    blocks = answer.json()["content"]
    assert blocks[1]["type"] == "mcp_tool_result" and not blocks[1]["is_error"]
    seen = "".join(block["text"] for block in blocks[1]["content"])
    assert "Bearer anthropic-style-token" in seen


def test_an_unreachable_request_server_is_a_failed_listing(open_gateway: Server) -> None:
    tool = {"type": "mcp", "server_label": "nowhere", "server_url": "http://127.0.0.1:9/mcp"}
    answer = httpx.post(
        f"{open_gateway.api}/responses",
        json={"model": "tiny", "input": "hi", "max_output_tokens": 2, "tools": [tool]},
        timeout=120,
    )
    assert answer.status_code == 200, answer.text
    listing = answer.json()["output"][0]
    assert listing["type"] == "mcp_list_tools" and listing["tools"] == []
    assert "nowhere" in listing["error"]
