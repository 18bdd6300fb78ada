"""The wire of ``/v1/responses`` translated for an OpenAI-wire chat upstream, against a
real `shunter serve`: delivery fields dropped and reported (the table of
:mod:`gateway.apis.responses.fields`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.fault_upstream import FaultUpstream

SHELL: dict[str, Any] = {
    "type": "function",
    "name": "shell",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
}


@pytest.fixture(scope="module")
def upstream() -> Iterator[FaultUpstream]:
    with FaultUpstream() as server:
        yield server


@pytest.fixture(scope="module")
def server(upstream: FaultUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("responses-wire")
    oai = f"backend: openai, base_url: '{upstream.url}'"
    (folder / "config.yaml").write_text(
        "reliability: {retries: 0}\n"
        "deployments:\n"
        f"  - {{name: oai, {oai}, model: fake}}\n"
        f"  - {{name: reason, {oai}, model: 'fault:reason:2'}}\n"
        f"  - {{name: think, {oai}, model: 'fault:think:2'}}\n"
        "models:\n"
        "  demo: {candidates: [oai]}\n"
        "  reason: {candidates: [reason]}\n"
        "  think: {candidates: [think]}\n"
        "  strict: {candidates: [oai], hosted_tools: refuse}\n"
    )
    started = start_server(folder / "config.yaml", folder / "server.log")
    yield started
    stop_server(started)


@pytest.fixture(scope="module")
def http(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=60) as client:
        yield client


def post(http: httpx.Client, body: dict[str, Any], path: str = "/v1/responses") -> httpx.Response:
    return http.post(path, content=json.dumps(body), headers={"content-type": "application/json"})


def test_a_deferred_tool_is_sent_and_the_deferral_reported(
    http: httpx.Client, upstream: FaultUpstream
) -> None:
    tools = [SHELL, {**SHELL, "name": "grep", "defer_loading": True}]
    answer = post(http, {"model": "demo", "input": "hi", "tools": tools})
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-shunter-dropped"] == "defer_loading"
    sent = upstream.last().body
    assert [t["function"]["name"] for t in sent["tools"]] == ["shell", "grep"]
    assert "defer_loading" not in json.dumps(sent)


def sse(response: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in response.text.splitlines() if line[:7] == "data: {"]


@pytest.mark.parametrize("model", ["reason", "think"])
def test_reasoning_round_trip_whole_and_streamed(
    http: httpx.Client, upstream: FaultUpstream, model: str
) -> None:
    whole = post(http, {"model": model, "input": "hi"})
    assert whole.status_code == 200, whole.text
    item = whole.json()["output"][0]
    assert item["type"] == "reasoning"
    assert item["content"] == [{"type": "reasoning_text", "text": "word0 word1 "}]
    streamed = post(http, {"model": model, "input": "hi", "stream": True})
    pieces = [e["delta"] for e in sse(streamed) if e["type"] == "response.reasoning_text.delta"]
    assert "".join(pieces) == "word0 word1 "
    said = whole.json()["output"][1]
    history = [{"role": "user", "content": "hi"}, item, said, {"role": "user", "content": "more"}]
    again = post(http, {"model": model, "input": history, "store": False})
    assert again.status_code == 200, again.text
    assert again.headers["x-shunter-dropped"] == "reasoning"  # said, not silent
    sent = upstream.last().body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert "reasoning_content" not in sent[1]


def test_hosted_mcp_items_go_as_hosted_tools_go(http: httpx.Client) -> None:
    listing = {
        "type": "mcp_list_tools",
        "id": "mcpl_1",
        "server_label": "docs",
        "tools": [{"name": "search", "input_schema": {"type": "object"}}],
    }
    history = [{"role": "user", "content": "hi"}, listing]
    answer = post(http, {"model": "demo", "input": history})
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-shunter-dropped"] == "mcp_list_tools"
    refused = post(http, {"model": "strict", "input": history})
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "input[1].type"


def test_text_parts_of_a_message_reach_the_model_as_paragraphs(
    http: httpx.Client, upstream: FaultUpstream
) -> None:
    parts = [{"type": "input_text", "text": "The end."}, {"type": "input_text", "text": "Sum"}]
    said = [{"type": "output_text", "text": "Paris is the "}, {"type": "output_text", "text": "."}]
    given = [
        {"role": "user", "content": parts},
        {"role": "assistant", "content": said},
        {"role": "user", "content": "more"},
    ]
    answer = post(http, {"model": "demo", "input": given})
    assert answer.status_code == 200, answer.text
    sent = upstream.last().body["messages"]
    assert [m["content"] for m in sent] == ["The end.\n\nSum", "Paris is the .", "more"]
    assert all(item["id"].startswith(("msg_", "rs_")) for item in answer.json()["output"])


ORPHAN: Any = [
    {"role": "user", "content": "hi"},
    {"type": "function_call_output", "call_id": "call_nowhere", "output": "done"},
]


def test_an_orphan_tool_output_is_refused_by_name(
    http: httpx.Client, upstream: FaultUpstream
) -> None:
    before = len(upstream.requests)
    refused = post(http, {"model": "demo", "input": ORPHAN})
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["param"] == "input[1].call_id" and "call_nowhere" in error["message"]
    assert len(upstream.requests) == before  # nothing went upstream
    call = {"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": "{}"}
    first = post(http, {"model": "demo", "input": [ORPHAN[0], call]})
    assert first.status_code == 200, first.text
    output = {"type": "function_call_output", "call_id": "call_1", "output": "done"}
    answered = post(
        http, {"model": "demo", "input": [output], "previous_response_id": first.json()["id"]}
    )
    assert answered.status_code == 200, answered.text  # its call is in the stored turn


def test_compact_refuses_nothing_and_compacts_a_stored_conversation(http: httpx.Client) -> None:
    refused = post(http, {"model": "demo", "input": []}, "/v1/responses/compact")
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "input"
    first = post(http, {"model": "demo", "input": "Fix the parser."})
    assert first.status_code == 200, first.text
    compact = {"model": "demo", "previous_response_id": first.json()["id"]}
    compacted = post(http, compact, "/v1/responses/compact")
    assert compacted.status_code == 200, compacted.text
    output = compacted.json()["output"]
    assert [item["type"] for item in output] == ["message", "compaction"]
    assert output[0]["content"] == [{"type": "input_text", "text": "Fix the parser."}]


def test_input_tokens_are_counted_as_openai_counts_them(http: httpx.Client) -> None:
    short = post(http, {"model": "demo", "input": "hi"}, "/v1/responses/input_tokens")
    assert short.status_code == 200, short.text
    said = short.json()
    assert said["object"] == "response.input_tokens" and said["input_tokens"] > 0
    assert short.headers["x-shunter-token-count"] == "estimated"
    long = post(http, {"model": "demo", "input": "hi " * 400}, "/v1/responses/input_tokens")
    assert long.json()["input_tokens"] > said["input_tokens"] + 250
    missing = post(http, {"model": "nope", "input": "hi"}, "/v1/responses/input_tokens")
    assert missing.status_code == 404


def test_a_bad_output_schema_is_refused_cleanly(http: httpx.Client) -> None:
    dangling = {"type": "json_schema", "name": "x", "schema": {"$ref": "#/$defs/gone"}}
    refused = post(http, {"model": "demo", "input": "hi", "text": {"format": dangling}})
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["param"] == "text.format.schema" and "points at nothing" in error["message"]
    for bad in ({"format": "json"}, {"format": {"type": "xml"}}):
        said = post(http, {"model": "demo", "input": "hi", "text": bad}).json()["error"]
        assert said["param"].startswith("text") and "instance of" not in said["message"], said
