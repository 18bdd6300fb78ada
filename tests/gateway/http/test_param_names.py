"""A refusal's ``param`` names the field of the API called, on a real ``shunter serve`` in
front of a loopback OpenAI-compatible upstream: embeddings name ``input``, Responses name
``input`` and ``text.format``, never chat's ``messages`` or ``response_format``. A chat
content part that in-process llama.cpp cannot read is refused by its place and type, while
an OpenAI-compatible upstream gets every part as sent."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.fault_upstream import FaultUpstream

LONG = "word " * 400


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("param-names")
    config = folder / "shunter.yaml"
    with FaultUpstream() as upstream:
        config.write_text(
            "deployments:\n"
            f"  - {{name: up, backend: openai, base_url: '{upstream.url}', model: up,"
            " embeddings: true, context_length: 64}\n"
            "models:\n  m: {candidates: [up]}\n"
        )
        srv = start_server(config, folder / "server.log")
        try:
            yield srv
        finally:
            stop_server(srv)


def error_of(server: Server, path: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = httpx.post(f"{server.api}{path}", json=body, timeout=30)
    assert answer.status_code == 400, answer.text
    error: dict[str, Any] = answer.json()["error"]
    return error


def test_an_embeddings_input_too_long_names_input(upstream: Server) -> None:
    error = error_of(upstream, "/embeddings", {"model": "m", "input": LONG})
    assert error["code"] == "context_length_exceeded" and error["param"] == "input"


def test_a_responses_input_too_long_names_input(upstream: Server) -> None:
    error = error_of(upstream, "/responses", {"model": "m", "input": LONG})
    assert error["param"] == "input"


def test_a_bad_responses_text_format_names_text_format(server: Server) -> None:
    tool = {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}
    fmt = {"type": "json_schema", "name": "x", "schema": {"type": "string"}}
    body = {"model": "tiny", "input": "hi", "tools": [tool], "text": {"format": fmt}}
    error = error_of(server, "/responses", body)
    assert error["param"] == "text.format", error


@pytest.mark.parametrize(
    "part",
    [
        {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
        {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBE"}},
        {"type": "mystery"},
    ],
)
def test_a_content_part_llamacpp_cannot_take_is_refused_by_name(
    server: Server, part: dict[str, Any]
) -> None:
    content = [{"type": "text", "text": "hi"}, part]
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": content}]
    body = {"model": "tiny", "messages": messages, "max_tokens": 2}
    error = error_of(server, "/chat/completions", body)
    assert error["param"] == "messages[1].content[1]", error
    assert error["code"] == "content_part_not_supported"
    assert f"'{part['type']}'" in error["message"]


def test_content_parts_reach_an_openai_compatible_upstream_unchanged(upstream: Server) -> None:
    parts = [
        {"type": "text", "text": "hi"},
        {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
        {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBE"}},
    ]
    body = {"model": "m", "messages": [{"role": "user", "content": parts}]}
    answer = httpx.post(f"{upstream.api}/chat/completions", json=body, timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.json()["echo"]["messages"][0]["content"] == parts
