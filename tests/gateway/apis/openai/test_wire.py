"""The wire of ``/v1/chat/completions`` and ``/v1/completions`` against a real `shunter
serve` in front of an OpenAI-wire upstream: the upstream's reasoning under both of its
names, whole and streamed, and back in the history."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.fault_upstream import FaultUpstream


@pytest.fixture(scope="module")
def upstream() -> Iterator[FaultUpstream]:
    with FaultUpstream() as server:
        yield server


@pytest.fixture(scope="module")
def server(upstream: FaultUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("chat-wire")
    oai = f"backend: openai, base_url: '{upstream.url}'"
    (folder / "config.yaml").write_text(
        "reliability: {retries: 0}\n"
        "deployments:\n"
        f"  - {{name: oai, {oai}, model: fake, context_length: 4096}}\n"
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


def post(http: httpx.Client, body: dict[str, Any], path: str) -> httpx.Response:
    return http.post(path, content=json.dumps(body), headers={"content-type": "application/json"})


def chat(model: str, **fields: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], **fields}


def deltas(response: httpx.Response) -> list[dict[str, Any]]:
    lines = [line[6:] for line in response.text.splitlines() if line.startswith("data: {")]
    return [c["choices"][0]["delta"] for c in map(json.loads, lines) if c["choices"]]


@pytest.mark.parametrize(
    ("model", "names"),
    [("reason", {"reasoning", "reasoning_content"}), ("think", {"reasoning_content"})],
)
def test_reasoning_round_trip_whole_and_streamed(
    http: httpx.Client, upstream: FaultUpstream, model: str, names: set[str]
) -> None:
    whole = post(http, chat(model), "/v1/chat/completions")
    assert whole.status_code == 200, whole.text
    message = whole.json()["choices"][0]["message"]
    assert {name for name in ("reasoning", "reasoning_content") if name in message} == names
    assert all(message[name] == "word0 word1 " for name in names)
    streamed = post(http, chat(model, stream=True), "/v1/chat/completions")
    own = "reasoning" if model == "reason" else "reasoning_content"  # the frames as sent
    assert "".join(d.get(own) or "" for d in deltas(streamed)) == "word0 word1 "
    turns = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", **{name: message[name] for name in names}, "content": "ok"},
        {"role": "user", "content": "more"},
    ]
    again = post(http, {"model": model, "messages": turns}, "/v1/chat/completions")
    assert again.status_code == 200, again.text
    sent = upstream.last().body["messages"][1]
    assert {name: sent[name] for name in names} == {name: message[name] for name in names}


def test_an_over_long_prompt_is_named_as_the_api_names_it(http: httpx.Client) -> None:
    long = "word " * 5000
    completion = post(http, {"model": "demo", "prompt": long}, "/v1/completions")
    assert completion.status_code == 400, completion.text
    assert completion.json()["error"]["param"] == "prompt"
    assert completion.json()["error"]["code"] == "context_length_exceeded"
    chat_said = post(
        http,
        {"model": "demo", "messages": [{"role": "user", "content": long}]},
        "/v1/chat/completions",
    )
    assert chat_said.json()["error"]["param"] == "messages"
