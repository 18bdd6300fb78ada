"""An upstream's failures as Gemini clients read them: an upstream refusal before any byte
is an error in Google's shape with Google's status name (and a rate limit's retry-after),
and a failure after the stream began is an ``error`` object in the stream's own framing
(a server-sent event, or the last element of the JSON array, which stays valid JSON)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.fault_upstream import FaultUpstream

URL = "/v1beta/models/flaky:{}"
BODY = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}


@pytest.fixture(scope="module")
def upstream() -> Iterator[FaultUpstream]:
    with FaultUpstream() as server:
        yield server


@pytest.fixture(scope="module")
def server(upstream: FaultUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("gemini-faults")
    (folder / "config.yaml").write_text(
        "reliability: {retries: 0}\n"
        "deployments:\n"
        f"  - {{name: up, backend: openai, base_url: '{upstream.url}', model: fake}}\n"
        "models:\n"
        "  flaky: {candidates: [up], fallback: false}\n"
    )
    server = start_server(folder / "config.yaml", folder / "server.log")
    yield server
    stop_server(server)


def post(server: Server, action: str, **params: str) -> httpx.Response:
    url = server.base_url + URL.format(action)
    return httpx.post(url, json=BODY, params=params, timeout=60)


@pytest.mark.parametrize(
    ("fault", "status", "name"),
    [("429:2", 429, "RESOURCE_EXHAUSTED"), ("400", 400, "INVALID_ARGUMENT")],
)
def test_an_upstream_refusal_in_googles_shape(
    server: Server, upstream: FaultUpstream, fault: str, status: int, name: str
) -> None:
    upstream.queue.append(fault)
    answer = post(server, "generateContent")
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["code"] == status and error["status"] == name and error["message"]
    if status == 429:
        assert answer.headers["retry-after"] == "2"
        retry = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "2s"}
        assert error["details"] == [retry]
    else:
        assert "details" not in error


def test_a_failure_after_the_first_byte_is_an_error_in_the_streams_framing(
    server: Server, upstream: FaultUpstream
) -> None:
    upstream.queue.append("error:3")
    events = post(server, "streamGenerateContent", alt="sse").text.split("\r\n\r\n")
    said = [json.loads(e.removeprefix("data: ")) for e in events if e.startswith("data: ")]
    assert said[0]["candidates"][0]["content"]["parts"][0]["text"]
    assert said[-1]["error"]["code"] >= 500 and said[-1]["error"]["status"]
    upstream.queue.append("error:3")
    elements = post(server, "streamGenerateContent").json()
    assert "candidates" in elements[0] and "error" in elements[-1]
