"""Every answer of ``/v1/responses`` on a real `shunter serve` validates against OpenAI's
own schemas: the ``Response`` object (whole, retrieved, and in each lifecycle event), each
stream event (``ResponseStreamEvent``), the input item list and the errors; a stream that
fails after its first byte ends with an ``error`` and a ``response.failed`` event that
validate too. Raw httpx, so that a ``null`` the SDK would tolerate is seen."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.fault_upstream import FaultUpstream
from tests.gateway.protocol.openapi import load_document, violations

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}
CASES: dict[str, dict[str, Any]] = {
    "plain": {"input": "Say hello", "instructions": "Be brief.", "max_output_tokens": 6},
    "items": {
        "input": [
            {"role": "developer", "content": "Be brief."},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        ],
        "max_output_tokens": 6,
        "metadata": {"k": "v"},
        "user": "u1",
    },
    "tool": {
        "input": "weather?",
        "tools": [WEATHER],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "temperature": 0,
        "max_output_tokens": 100,
    },
    "schema": {
        "input": "json please",
        "text": {
            "format": {
                "type": "json_schema",
                "name": "answer",
                "schema": {"type": "object", "properties": {"a": {"type": "string"}}},
            }
        },
        "temperature": 0,
        "max_output_tokens": 6,
    },
    "json": {
        "input": "json please",
        "text": {"format": {"type": "json_object"}},
        "temperature": 0,
        "max_output_tokens": 6,
    },
}


@pytest.fixture(scope="module")
def upstream() -> Iterator[FaultUpstream]:
    with FaultUpstream() as server:
        yield server


@pytest.fixture(scope="module")
def server(
    tiny_model: Path, upstream: FaultUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("schema-responses")
    (folder / "config.yaml").write_text(
        "reliability: {retries: 0}\n"
        "deployments:\n"
        f"  - {{name: gen, backend: llamacpp, model: {tiny_model}, n_ctx: 2048, threads: 1,"
        " parallel: 2}\n"
        f"  - {{name: cut, backend: openai, base_url: '{upstream.url}', model: 'fault:error:3'}}\n"
        "models:\n"
        "  tiny: {candidates: [gen]}\n"
        "  cut: {candidates: [cut]}\n"
    )
    server = start_server(folder / "config.yaml", folder / "server.log")
    yield server
    stop_server(server)


@pytest.fixture(scope="module")
def http(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.api, timeout=120) as client:
        yield client


def event_schemas() -> dict[str, str]:
    """Each stream event's own schema, by its ``type`` (the members of ResponseStreamEvent)."""
    schemas = load_document()["components"]["schemas"]
    members = [ref["$ref"].rsplit("/", 1)[1] for ref in schemas["ResponseStreamEvent"]["anyOf"]]
    return {schemas[name]["properties"]["type"]["enum"][0]: name for name in members}


SCHEMAS = event_schemas()


def events(text: str) -> list[tuple[str, Any]]:
    """``(event, data)`` of each server-sent event; the stream must end with the terminal
    ``data: [DONE]`` of the Open Responses specification."""
    *blocks, last = text.strip().split("\n\n")
    assert last == "data: [DONE]", last
    out = []
    for block in blocks:
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        out.append((lines["event"], json.loads(lines["data"])))
    return out


# keys OpenAI's own answers write as null, and the Open Responses schema requires, though
# OpenAI's published schema leaves their null out: ``usage`` while a response runs, ``user``,
# and a ``json_schema`` format's ``description`` (docs/agent-clients.md says so)
_NULL_IN_PRACTICE = ("usage", "user")


def _as_published(response: dict[str, Any]) -> dict[str, Any]:
    """A response object with the keys of :data:`_NULL_IN_PRACTICE` (present) left out
    where null, and so a ``json_schema`` format's ``description`` (written, null)."""
    assert all(key in response for key in _NULL_IN_PRACTICE)
    published = {k: v for k, v in response.items() if k not in _NULL_IN_PRACTICE or v is not None}
    form = (response.get("text") or {}).get("format") or {}
    if form.get("type") == "json_schema":
        assert "description" in form  # as OpenAI writes it
        if form["description"] is None:
            form = {k: v for k, v in form.items() if k != "description"}
            published["text"] = {**response["text"], "format": form}
    return published


def response_violations(response: dict[str, Any]) -> list[str]:
    """``violations`` of a response object (as :func:`_as_published` writes it)."""
    return violations("Response", _as_published(response))


def event_violations(name: str, data: dict[str, Any]) -> list[str]:
    """``violations`` of an event (its response as :func:`_as_published` writes it)."""
    response = data.get("response")
    if isinstance(response, dict):
        data = {**data, "response": _as_published(response)}
    return violations(SCHEMAS[name], data)


@pytest.mark.parametrize("case", CASES)
def test_responses_and_their_events_validate(http: httpx.Client, case: str) -> None:
    body = {"model": "tiny", **CASES[case]}
    whole = http.post("/responses", json=body)
    assert whole.status_code == 200, whole.text
    assert response_violations(whole.json()) == []
    kinds = [item["type"] for item in whole.json()["output"]]
    assert kinds == (["function_call"] if case == "tool" else ["message"])

    streamed = http.post("/responses", json={**body, "stream": True})
    assert streamed.status_code == 200 and streamed.text.endswith("\n\n")
    seen = events(streamed.text)
    for name, data in seen:
        assert data["type"] == name
        assert event_violations(name, data) == [], data
    assert [data["sequence_number"] for _, data in seen] == list(range(len(seen)))
    assert seen[0][0] == "response.created" and seen[1][0] == "response.in_progress"
    final = seen[-1][1]["response"]
    assert seen[-1][0] in ("response.completed", "response.incomplete")
    assert final["id"] == seen[0][1]["response"]["id"]
    assert [item["type"] for item in final["output"]] == kinds

    stored = http.get(f"/responses/{final['id']}")
    assert stored.status_code == 200 and stored.json() == final
    items = http.get(f"/responses/{final['id']}/input_items").json()
    assert violations("ResponseItemList", items) == []
    expected = 1 if isinstance(body["input"], str) else len(body["input"])
    assert len(items["data"]) == expected


def test_a_stream_that_fails_after_its_first_byte_says_so_in_band(http: httpx.Client) -> None:
    answer = http.post("/responses", json={"model": "cut", "input": "hi", "stream": True})
    assert answer.status_code == 200
    seen = events(answer.text)
    for name, data in seen:
        assert event_violations(name, data) == [], data
    assert [name for name, _ in seen[-2:]] == ["error", "response.failed"]
    failed = seen[-1][1]["response"]
    assert failed["status"] == "failed" and failed["error"]["code"] == "server_error"
    assert failed["output"][0]["content"][0]["text"].startswith("word0 ")
    assert http.get(f"/responses/{failed['id']}").status_code == 404  # not stored


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("POST", "/responses", {"model": "tiny"}, 400),
        ("POST", "/responses", {"model": "nope", "input": "x"}, 404),
        ("POST", "/responses", {"model": "tiny", "input": "x", "previous_response_id": "r"}, 404),
        ("GET", "/responses/resp_unknown", None, 404),
        ("DELETE", "/responses/resp_unknown", None, 404),
    ],
)
def test_errors_validate(
    http: httpx.Client, method: str, path: str, body: Any, status: int
) -> None:
    answer = http.request(method, path, json=body)
    assert answer.status_code == status, answer.text
    assert violations("ErrorResponse", answer.json()) == []
