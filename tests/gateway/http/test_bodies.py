"""Request bodies still arriving are bounded in sum and per key: slow uploads of one key
get a 429 past the key's share instead of growing the server's memory, and what a body
held is given back once it is whole."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.errors import RateLimitError, ServiceUnavailableError
from gateway.http.bodies import BodyBuffers
from tests.conftest import Server, start_server, stop_server

MB = 1_000_000
BODY_SIZE = 9 * MB


@pytest.fixture(scope="module")
def bounded(gateway_config: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The test config with a 12 MB share per key (open mode: one key for everyone)."""
    folder = tmp_path_factory.mktemp("bodies")
    config = folder / "shunter.yaml"
    extra = "http:\n  body_buffers_mb: 20\n  body_buffers_per_key_mb: 12\n"
    config.write_text(gateway_config.read_text() + extra)
    srv = start_server(config, folder / "server.log")
    yield srv
    stop_server(srv)


def _body() -> bytes:
    request = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    raw = json.dumps(request).encode()
    return raw + b" " * (BODY_SIZE - len(raw))  # JSON allows the whitespace


def _upload(server: Server) -> socket.socket:
    host, port = server.base_url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % BODY_SIZE
    )
    return sock


def _answer(sock: socket.socket) -> tuple[int, bytes]:
    data = b""
    while b"\r\n\r\n" not in data and (chunk := sock.recv(65536)):
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.lower().split(b"\r\n"):
        if line.startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    while len(rest) < length and (chunk := sock.recv(65536)):
        rest += chunk
    return int(head.split(b" ", 2)[1]), rest


def test_a_keys_slow_uploads_stop_at_its_share_and_are_given_back(bounded: Server) -> None:
    body = _body()
    first = _upload(bounded)
    second = _upload(bounded)
    try:
        first.sendall(body[: 7 * MB])
        time.sleep(1.0)  # the server has read it: 7 MB of the key's 12 held
        # refused and closed while it is still sending
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            second.sendall(body[: 7 * MB])
        status, rest = _answer(second)
        assert status == 429
        assert b"body_buffers_full" in rest
        first.sendall(body[7 * MB :])
        assert _answer(first)[0] == 200
    finally:
        first.close()
        second.close()
    again = _upload(bounded)  # the first body's bytes no longer count
    try:
        again.sendall(body)
        assert _answer(again)[0] == 200
    finally:
        again.close()


def test_the_whole_bound_holds_across_keys() -> None:
    buffers = BodyBuffers(total=20 * MB, per_key=12 * MB)
    one, two, three = buffers.lease("a"), buffers.lease("b"), buffers.lease("c")
    one.take(9 * MB)
    two.take(9 * MB)
    with pytest.raises(ServiceUnavailableError):
        three.take(3 * MB)
    with pytest.raises(RateLimitError):
        one.take(4 * MB)
    one.release()
    three.take(3 * MB)
    assert buffers.held == 12 * MB and buffers.key_bytes("a") == 0
    two.release()
    three.release()
    assert buffers.held == 0
