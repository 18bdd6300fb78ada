"""A tool's JSON Schema that the meta-schema refuses is a 400 naming the field as each API
names it (chat, Responses, Messages), on a real `shunter serve` in front of a loopback
OpenAI-compatible upstream; a valid schema, an unanchored ``pattern`` included, is sent on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.fault_upstream import FaultUpstream

BAD = {"type": "object", "properties": {"city": {"type": "string", "minLength": -3}}}
GOOD = {"type": "object", "properties": {"code": {"type": "string", "pattern": "[A-Z]{3}"}}}
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, FaultUpstream]]:
    folder = tmp_path_factory.mktemp("tool-schemas")
    with FaultUpstream() as upstream:
        (folder / "shunter.yaml").write_text(
            "deployments:\n"
            f"  - {{name: up, backend: openai, base_url: '{upstream.url}', model: up}}\n"
            "models:\n  m: {candidates: [up]}\n"
        )
        server = start_server(folder / "shunter.yaml", folder / "server.log")
        try:
            yield server, upstream
        finally:
            stop_server(server)


def chat(schema: dict[str, Any]) -> dict[str, Any]:
    tool = {"type": "function", "function": {"name": "f", "parameters": schema}}
    return {"model": "m", "messages": HI, "tools": [tool]}


def responses(schema: dict[str, Any]) -> dict[str, Any]:
    tools = [{"type": "function", "name": "f", "parameters": schema}]
    return {"model": "m", "input": "hi", "tools": tools}


def messages(schema: dict[str, Any]) -> dict[str, Any]:
    tools = [{"name": "f", "input_schema": schema}]
    return {"model": "m", "max_tokens": 16, "messages": HI, "tools": tools}


def post(server: Server, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.api}{path}", json=body, timeout=30)


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/chat/completions", chat, "tools[0].function.parameters"),
        ("/responses", responses, "tools[0].parameters"),
    ],
)
def test_an_invalid_tool_schema_is_refused_by_its_field(
    gateway: tuple[Server, FaultUpstream], path: str, body: Any, param: str
) -> None:
    server, upstream = gateway
    before = len(upstream.requests)
    answer = post(server, path, body(BAD))
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == param
    assert "minLength" in error["message"] and "JSON Schema" in error["message"]
    assert len(upstream.requests) == before  # never sent on


def test_an_invalid_messages_input_schema_is_refused_in_anthropic_shape(
    gateway: tuple[Server, FaultUpstream],
) -> None:
    server, _ = gateway
    answer = post(server, "/messages", messages(BAD))
    assert answer.status_code == 400, answer.text
    body = answer.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "tools[0].input_schema" in body["error"]["message"]
    assert "minLength" in body["error"]["message"]


@pytest.mark.parametrize(
    ("path", "body"),
    [("/chat/completions", chat), ("/responses", responses), ("/messages", messages)],
)
def test_a_valid_schema_with_an_unanchored_pattern_is_sent_on(
    gateway: tuple[Server, FaultUpstream], path: str, body: Any
) -> None:
    server, upstream = gateway
    answer = post(server, path, body(GOOD))
    assert answer.status_code == 200, answer.text
    sent = upstream.requests[-1].body["tools"][0]["function"]["parameters"]
    assert sent["properties"]["code"]["pattern"] == "[A-Z]{3}"
