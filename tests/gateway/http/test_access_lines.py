"""What a client reads when it goes wrong, and what the access line says of it, against a
real `shunter serve`: a 404 for an unknown model names the models served; a refusal's line
carries its reason; every client that leaves before its answer is a 499 line, over HTTP
(whole or streamed, watched or not) and over a WebSocket."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import websockets.sync.client

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.anthropic_upstream import AnthropicUpstream
from tests.fixtures.fault_upstream import FaultUpstream

MODELS = [f"m{i:02d}" for i in range(25)]


@pytest.fixture(scope="module")
def upstream() -> Iterator[FaultUpstream]:
    with FaultUpstream() as server:
        yield server


@pytest.fixture(scope="module")
def anthropic_up() -> Iterator[AnthropicUpstream]:
    with AnthropicUpstream() as server:
        yield server


@pytest.fixture(scope="module")
def server(
    upstream: FaultUpstream,
    anthropic_up: AnthropicUpstream,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("access-lines")
    oai = f"backend: openai, base_url: '{upstream.url}'"
    models = "".join(f"  {name}: {{candidates: [oai]}}\n" for name in MODELS)
    (folder / "config.yaml").write_text(
        "reliability: {retries: 0}\n"
        "deployments:\n"
        f"  - {{name: oai, {oai}, model: fake}}\n"
        f"  - {{name: late, {oai}, model: 'fault:ttft:1500'}}\n"
        f"  - {{name: hang, {oai}, model: 'fault:hang'}}\n"
        f"  - {{name: claude, backend: anthropic, base_url: '{anthropic_up.url}',"
        " api_key_env: UP_KEY, model: slow}\n"
        "models:\n"
        "  late: {candidates: [late]}\n"
        "  hang: {candidates: [hang]}\n"
        "  claude: {candidates: [claude]}\n" + models
    )
    env = {"UP_KEY": "sk-upstream"}
    started = start_server(folder / "config.yaml", folder / "server.log", env=env)
    yield started
    stop_server(started)


def access_lines(server: Server) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for line in server.log().splitlines()
        if line.startswith("{") and '"event": "request"' in line
    ]


def eventually(condition: Callable[[], Any], timeout_s: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.05)
    return condition()


def line_of(server: Server, request_id: str) -> dict[str, Any] | None:
    return next((x for x in access_lines(server) if x.get("request_id") == request_id), None)


def test_an_unknown_model_is_answered_with_the_models_served(server: Server) -> None:
    answer = httpx.post(
        f"{server.api}/chat/completions",
        json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
        timeout=30,
    )
    assert answer.status_code == 404
    message = answer.json()["error"]["message"]
    assert "'gpt-4o' does not exist" in message
    assert "late, hang, claude, m00" in message and "m16" in message  # the first 20 of 28
    assert "m17" not in message and "(and 8 more)" in message
    messages = httpx.post(
        f"{server.base_url}/v1/messages",
        json={
            "model": "claude-x",
            "max_tokens": 5,
            "messages": [{"role": "user", "content": "hi"}],
        },
        timeout=30,
    )
    assert (
        messages.status_code == 404
        and "late, hang, claude, m00" in messages.json()["error"]["message"]
    )


def test_a_refusals_access_line_says_why(server: Server) -> None:
    answer = httpx.post(
        f"{server.api}/chat/completions",
        json={"model": "m00", "messages": [{"role": "user", "content": "hi"}], "top_p": 7},
        timeout=30,
    )
    assert answer.status_code == 400
    line = eventually(lambda: line_of(server, answer.headers["x-request-id"]))
    assert line["status"] == 400 and line["error_param"] == "top_p"
    unknown = httpx.post(
        f"{server.api}/chat/completions",
        json={"model": "nope", "messages": [{"role": "user", "content": "hi"}]},
        timeout=30,
    )
    line = eventually(lambda: line_of(server, unknown.headers["x-request-id"]))
    assert (line["status"], line["error_code"], line["error_param"]) == (
        404,
        "model_not_found",
        "model",
    )


def _leave_early(server: Server, path: str, body: dict[str, Any], cut: int = 0) -> str:
    """Send ``body`` on a raw socket (its last ``cut`` bytes never), leave before the
    answer; its request id."""
    rid = f"req-gone-{time.monotonic_ns()}"
    data = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nx-request-id: {rid}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(data)}\r\n\r\n"
    )
    port = int(server.base_url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(head.encode() + data[: len(data) - cut])
        time.sleep(0.3)
    return rid


@pytest.mark.parametrize(
    ("stream", "cut", "model"),
    [(True, 0, "late"), (False, 0, "hang"), (False, 5, "m00"), (True, 5, "m00")],
    ids=["streamed", "whole", "whole-mid-body", "streamed-mid-body"],
)
def test_every_client_that_leaves_is_a_499_line(
    server: Server, stream: bool, cut: int, model: str
) -> None:
    body = {"model": model, "stream": stream, "messages": [{"role": "user", "content": "hi"}]}
    rid = _leave_early(server, "/v1/chat/completions", body, cut)
    line = eventually(lambda: line_of(server, rid))
    assert line is not None and line["status"] == 499, line


def test_a_client_that_leaves_an_operation_no_watch_serves_is_a_499_line(server: Server) -> None:
    body = {"model": "claude", "messages": [{"role": "user", "content": "hi"}]}
    rid = _leave_early(server, "/v1/messages/count_tokens", body)  # counted upstream in 1 s
    line = eventually(lambda: line_of(server, rid))
    assert line is not None and line["status"] == 499, line


def test_a_websocket_client_that_leaves_mid_turn_is_a_499_line(server: Server) -> None:
    url = server.api.replace("http://", "ws://") + "/responses"
    create = {"type": "response.create", "model": "late", "input": "hi"}
    before = len(access_lines(server))
    with websockets.sync.client.connect(url) as sock:
        sock.send(json.dumps(create))
        time.sleep(0.3)
    lines = eventually(
        lambda: [x for x in access_lines(server)[before:] if x["method"] == "WEBSOCKET"]
    )
    assert lines and lines[-1]["status"] == 499, lines
