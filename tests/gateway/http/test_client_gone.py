"""Work stops when the client leaves: a real `shunter serve` in front of real loopback
upstreams, and clients on raw sockets that hang up, or never read what they asked for."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.fault_upstream import FaultUpstream
from tests.gateway.http.leaky_upstream import LeakyUpstream
from tests.waiting import eventually

HELLO = [{"role": "user", "content": "hi"}]
SEND_TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def upstreams() -> Iterator[tuple[FaultUpstream, LeakyUpstream]]:
    with FaultUpstream() as fault, LeakyUpstream("firehose") as hose:
        yield fault, hose


@pytest.fixture(scope="module")
def gateway(
    upstreams: tuple[FaultUpstream, LeakyUpstream],
    tiny_model: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Server]:
    fault, hose = upstreams
    folder = tmp_path_factory.mktemp("client-gone")
    config = folder / "shunter.yaml"
    slow = "timeouts: {first_token_s: 120, total_s: 120}"
    config.write_text(
        f"http: {{send_timeout_s: {SEND_TIMEOUT_S}}}\n"
        "deployments:\n"
        f"  - {{name: a, backend: openai, base_url: '{fault.url}', model: up, {slow}}}\n"
        f"  - {{name: hose, backend: openai, base_url: '{hose.url}/v1', model: up, {slow}}}\n"
        f"  - {{name: local, backend: llamacpp, model: {tiny_model}, n_ctx: 4096, parallel: 1,"
        " threads: 1}\n"
        "models:\n"
        "  m: {candidates: [a]}\n"
        "  hose: {candidates: [hose]}\n"
        "  local: {candidates: [local]}\n"
    )
    server = start_server(config, folder / "server.log")
    yield server
    stop_server(server)


def post_raw(server: Server, body: dict[str, Any], rcvbuf: int | None = None) -> socket.socket:
    """Send a chat request on a raw socket and return it unread."""
    sock = socket.socket()
    if rcvbuf is not None:  # a small window: the gateway's writes fill it quickly
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    port = int(server.base_url.rsplit(":", 1)[1])
    sock.connect(("127.0.0.1", port))
    data = json.dumps(body).encode()
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\n"
        f"content-type: application/json\r\ncontent-length: {len(data)}\r\n\r\n"
    )
    sock.sendall(head.encode() + data)
    return sock


def deployment_figures(server: Server, name: str) -> dict[str, Any]:
    answer = httpx.get(f"{server.base_url}/health/readiness", timeout=10).json()
    figures: dict[str, Any] = answer["deployments"][name]
    return figures


def access_lines(server: Server) -> list[dict[str, Any]]:
    lines = []
    for line in server.log().splitlines():
        if line.startswith("{") and '"event": "request"' in line:
            lines.append(json.loads(line))
    return lines


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_hangs_up_cancels_the_upstream_call(
    gateway: Server, upstreams: tuple[FaultUpstream, LeakyUpstream], stream: bool
) -> None:
    fault, _ = upstreams
    seen = len(fault.requests)
    # the upstream reads the request and never answers: without the client's disconnect
    # noticed, the gateway would wait out its 120 s timeouts
    sock = post_raw(gateway, {"model": "m", "messages": HELLO, "stream": stream, "x_fault": "hang"})
    assert eventually(lambda: len(fault.requests) > seen)
    assert deployment_figures(gateway, "a")["in_flight"] == 1
    sock.close()
    assert fault.last().wait_closed(timeout=15.0)
    assert eventually(lambda: deployment_figures(gateway, "a")["in_flight"] == 0, 15.0)
    assert eventually(
        lambda: any(line.get("client_gone") == "disconnected" for line in access_lines(gateway))
    )
    gone = [line for line in access_lines(gateway) if line.get("client_gone")][-1]
    assert gone["status"] == 499


def test_a_client_that_leaves_a_started_stream_is_logged_499(
    gateway: Server, upstreams: tuple[FaultUpstream, LeakyUpstream]
) -> None:
    fault, _ = upstreams
    body = {"model": "m", "messages": HELLO, "stream": True, "x_fault": "slow:300"}
    sock = post_raw(gateway, body)
    assert b"200 OK" in sock.recv(65536)  # the answer has begun: its status is sent
    sock.close()
    assert fault.last().wait_closed(timeout=15.0)
    assert eventually(lambda: access_lines(gateway)[-1].get("client_gone") == "disconnected")
    line = access_lines(gateway)[-1]
    assert (line["status"], line["stream"]) == (499, True)


def test_an_unread_stream_is_cancelled_after_the_send_timeout(
    gateway: Server, upstreams: tuple[FaultUpstream, LeakyUpstream]
) -> None:
    _, hose = upstreams
    hose.hung_up.clear()
    body = {"model": "hose", "messages": HELLO, "stream": True}
    sock = post_raw(gateway, body, rcvbuf=4096)  # connected, never read
    try:
        assert eventually(lambda: hose.chunks_sent > 0)
        # once the socket buffers are full, one write waits for SEND_TIMEOUT_S, then the
        # stream is cancelled and its upstream connection closed
        assert hose.hung_up.wait(60.0)
        assert eventually(lambda: deployment_figures(gateway, "hose")["in_flight"] == 0, 15.0)
        assert eventually(
            lambda: any(line.get("client_gone") == "send_timeout" for line in access_lines(gateway))
        )
        timed_out = [line for line in access_lines(gateway) if line.get("client_gone")][-1]
        assert timed_out["status"] == 499
    finally:
        sock.close()
    # the gateway still serves others
    other = httpx.post(
        f"{gateway.api}/chat/completions", json={"model": "m", "messages": HELLO}, timeout=30
    )
    assert other.status_code == 200


def test_a_local_generation_stops_when_its_client_hangs_up(gateway: Server) -> None:
    body = {"model": "local", "messages": HELLO, "max_tokens": 4000, "temperature": 0}
    sock = post_raw(gateway, body)
    assert eventually(lambda: deployment_figures(gateway, "local")["in_flight"] == 1)
    time.sleep(0.3)  # well into a generation of thousands of tokens
    assert deployment_figures(gateway, "local")["slots_busy"] == 1
    sock.close()
    assert eventually(lambda: deployment_figures(gateway, "local")["in_flight"] == 0, 15.0)
    assert eventually(lambda: not deployment_figures(gateway, "local").get("slots_busy"), 15.0)
    # given up, not generated to its end for nobody
    assert eventually(lambda: access_lines(gateway)[-1].get("model") == "local")
    line = access_lines(gateway)[-1]
    assert (line["status"], line.get("client_gone")) == (499, "disconnected")
    # the one slot is free again: the next request is served at once
    quick = {"model": "local", "messages": HELLO, "max_tokens": 4}
    answer = httpx.post(f"{gateway.api}/chat/completions", json=quick, timeout=60)
    assert answer.status_code == 200


def test_a_client_that_leaves_before_its_whole_body_is_logged_499(gateway: Server) -> None:
    before = len(access_lines(gateway))
    port = int(gateway.base_url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as sock:
        head = (
            "POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\n"
            "content-type: application/json\r\ncontent-length: 1000\r\n\r\n"
        )
        sock.sendall(head.encode() + b'{"model": "m", "mess')  # and hangs up mid-body

    def gone() -> list[dict[str, Any]]:
        # the line of the earlier test's last answer may still be written after ``before``
        # was counted: this request's line is the one that says its client left
        return [line for line in access_lines(gateway)[before:] if line.get("client_gone")]

    assert eventually(lambda: bool(gone()))
    line = gone()[0]
    assert (line["status"], line.get("client_gone")) == (499, "disconnected")
