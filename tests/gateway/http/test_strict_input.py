"""Request bodies are read as the published schemas type them, on a real `shunter serve` in
front of a loopback OpenAI-compatible upstream: no coercion, ranges enforced, nesting of
any depth a 400, and each refusal naming the field as the API called names it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.fault_upstream import FaultUpstream

HELLO = [{"role": "user", "content": "hi"}]
ROUTES = {
    "/chat/completions": {"model": "m", "messages": HELLO},
    "/completions": {"model": "m", "prompt": "hi"},
    "/embeddings": {"model": "m", "input": "hi"},
    "/responses": {"model": "m", "input": "hi"},
    "/messages": {"model": "m", "max_tokens": 16, "messages": HELLO},
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("strict-input")
    config = folder / "shunter.yaml"
    with FaultUpstream() as upstream:
        config.write_text(
            "deployments:\n"
            f"  - {{name: up, backend: openai, base_url: '{upstream.url}', model: up,"
            " embeddings: true}\n"
            "models:\n  m: {candidates: [up]}\n"
        )
        srv = start_server(config, folder / "server.log")
        try:
            yield srv
        finally:
            stop_server(srv)


def post(server: Server, path: str, body: dict[str, Any] | bytes) -> httpx.Response:
    if isinstance(body, bytes):
        headers = {"content-type": "application/json"}
        return httpx.post(f"{server.api}{path}", content=body, headers=headers, timeout=30)
    return httpx.post(f"{server.api}{path}", json=body, timeout=30)


@pytest.mark.parametrize("path", list(ROUTES))
@pytest.mark.parametrize("depth", [2_000, 20_000])
def test_a_deeply_nested_large_body_is_a_400(server: Server, path: str, depth: int) -> None:
    nested = b"[" * depth + b"]" * depth
    padding = b"x" * 16_384  # past the size where bodies take the faster decoder
    body = b'{"pad": "' + padding + b'", "extra": ' + nested + b"}"
    answer = post(server, path, body)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert "JSON" in error["message"] and len(answer.content) < 2_000


@pytest.mark.parametrize("path", list(ROUTES))
@pytest.mark.parametrize("depth", [150, 300, 900])
def test_nesting_in_an_unknown_field_is_served_or_refused_never_an_error(
    server: Server, path: str, depth: int
) -> None:
    extra = json.loads("[" * depth + "]" * depth)
    for padding in ("", "x" * 16_384):  # both decoders
        answer = post(server, path, {**ROUTES[path], "pad": padding, "extra": extra})
        assert answer.status_code in (200, 400), answer.text


@pytest.mark.parametrize(
    ("path", "field", "value"),
    [
        ("/chat/completions", "stream", "yes"),
        ("/chat/completions", "max_tokens", "16"),
        ("/chat/completions", "temperature", "0.5"),
        ("/chat/completions", "top_logprobs", 21),
        ("/chat/completions", "n", True),
        ("/completions", "stream", "yes"),
        ("/completions", "max_tokens", "16"),
        ("/completions", "logprobs", 6),
        ("/embeddings", "dimensions", "8"),
        ("/responses", "stream", "yes"),
        ("/responses", "max_output_tokens", "16"),
        ("/responses", "top_logprobs", 21),
        ("/responses", "top_logprobs", -1),
    ],
)
def test_values_of_the_wrong_type_or_range_are_refused_by_name(
    server: Server, path: str, field: str, value: object
) -> None:
    answer = post(server, path, {**ROUTES[path], field: value})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == field


def test_a_messages_request_with_a_string_for_a_number_is_refused(server: Server) -> None:
    answer = post(server, "/messages", {**ROUTES["/messages"], "max_tokens": "16"})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["type"] == "invalid_request_error" and "max_tokens" in error["message"]


def test_a_tool_message_needs_the_id_of_the_call_it_answers(server: Server) -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [
        *HELLO,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "content": "42"},
    ]
    answer = post(server, "/chat/completions", {"model": "m", "messages": messages})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == "messages[2].tool_call_id"
    assert "Missing required parameter" in error["message"]
    messages[2]["tool_call_id"] = "call_1"
    answer = post(server, "/chat/completions", {"model": "m", "messages": messages})
    assert answer.status_code == 200


def test_an_unknown_model_is_named_but_not_echoed_whole(server: Server) -> None:
    name = "m" * (1 << 20)
    answer = post(server, "/chat/completions", {"model": name, "messages": HELLO})
    assert answer.status_code == 404
    error = answer.json()["error"]
    assert error["code"] == "model_not_found" and error["param"] == "model"
    assert len(answer.content) < 4_096 and error["message"].startswith("The model 'mmm")
