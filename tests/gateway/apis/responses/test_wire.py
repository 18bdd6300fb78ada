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
