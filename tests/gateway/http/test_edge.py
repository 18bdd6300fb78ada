"""The limits below the app, against a real `shunter serve` over raw sockets.

Each server runs with small limits (flags), so that a test waits a second or two, not the
defaults' ten or thirty.
"""

from __future__ import annotations

import json
import resource
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import websockets.sync.client

from tests.conftest import Server, free_port, start_server, stop_server
from tests.waiting import eventually

HEADER_TIMEOUT_S = 1.0
BODY_TIMEOUT_S = 2.0
MAX_CONNECTIONS = 4
CHAT = b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}'


@pytest.fixture(scope="module")
def edge(gateway_config: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    args = ["--header-timeout", f"{HEADER_TIMEOUT_S}s", "--body-timeout", f"{BODY_TIMEOUT_S}s"]
    srv = start_server(gateway_config, tmp_path_factory.mktemp("edge") / "server.log", args=args)
    yield srv
    stop_server(srv)


@pytest.fixture(scope="module")
def capped(gateway_config: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Few connections, default timeouts: nothing closes while a test looks."""
    log = tmp_path_factory.mktemp("capped") / "server.log"
    srv = start_server(gateway_config, log, args=["--max-connections", str(MAX_CONNECTIONS)])
    yield srv
    stop_server(srv)


def connect(server: Server) -> socket.socket:
    host, port = server.base_url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    return sock


def answer(sock: socket.socket, timeout_s: float = 15.0) -> bytes:
    """Everything the server sends until it closes the connection or goes quiet."""
    sock.settimeout(timeout_s)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
            if b"\r\n\r\n" in data and _complete(data):
                break
    except (TimeoutError, ConnectionResetError):
        pass
    return data


def _complete(data: bytes) -> bool:
    head, _, body = data.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return False


def status_of(data: bytes) -> int:
    return int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else 0


def error_of(data: bytes) -> dict[str, object]:
    error: dict[str, object] = json.loads(data.partition(b"\r\n\r\n")[2])["error"]
    return error


def rss_mb(server: Server) -> float:
    for line in Path(f"/proc/{server.process.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def post_head(length: int) -> bytes:
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % length
    )


def answers_normally(server: Server) -> bool:
    try:
        return httpx.get(f"{server.api}/models", timeout=10).status_code == 200
    except httpx.TransportError:
        return False


def test_oversized_headers_get_431_and_memory_stays_flat(edge: Server) -> None:
    for _ in range(5):  # warm: the first requests allocate what every request needs
        assert answers_normally(edge)
    before = rss_mb(edge)
    held = []
    for _ in range(20):  # each would send 5 MB of one header, and never finish it
        sock = connect(edge)
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\nX-Big: ")
        sent = 0
        while sent < 5_000_000 and not select.select([sock], [], [], 0)[0]:
            try:
                sock.sendall(b"a" * 65536)
            except OSError:
                break
            sent += 65536
        held.append(sock)
    grown = rss_mb(edge) - before
    replies = [answer(sock) for sock in held]
    assert [status_of(r) for r in replies] == [431] * 20
    assert error_of(replies[0])["code"] == "request_header_fields_too_large"
    assert grown < 40, f"RSS grew {grown:.0f} MB"
    for sock in held:
        sock.close()
    assert answers_normally(edge)


def test_a_large_body_is_not_counted_as_headers(edge: Server) -> None:
    body = json.dumps({"model": "tiny", "messages": [], "pad": "x" * 300_000}).encode()
    with connect(edge) as sock:
        sock.sendall(post_head(len(body)) + body)  # one write: head and body in one read
        reply = answer(sock)
    assert status_of(reply) == 400  # the body was read and judged, not refused as headers


def test_pipelined_requests_are_all_answered(edge: Server) -> None:
    request = b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n"
    with connect(edge) as sock:
        sock.sendall(request * 3)
        data = b""
        sock.settimeout(15)
        while data.count(b"HTTP/1.1 200") < 3:
            chunk = sock.recv(65536)
            assert chunk, data
            data += chunk


def test_slow_headers_are_cut_after_the_header_timeout(edge: Server) -> None:
    with connect(edge) as sock:
        started = time.monotonic()
        reply = b""
        for byte in b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + b"a" * 200:
            try:
                sock.send(bytes([byte]))
            except OSError:
                break
            if select.select([sock], [], [], 0.1)[0]:
                reply = answer(sock)
                break
        elapsed = time.monotonic() - started
    assert status_of(reply) == 408, reply
    assert error_of(reply)["code"] == "request_timeout"
    assert HEADER_TIMEOUT_S * 0.9 <= elapsed < HEADER_TIMEOUT_S + 10


def test_a_kept_alive_connections_next_head_has_the_same_deadline(edge: Server) -> None:
    with connect(edge) as sock:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert status_of(answer(sock)) == 200
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: local")  # and then nothing
        started = time.monotonic()
        reply = answer(sock)
        elapsed = time.monotonic() - started
    assert status_of(reply) == 408
    assert HEADER_TIMEOUT_S * 0.9 <= elapsed < HEADER_TIMEOUT_S + 10


def test_a_silent_connection_is_closed_after_the_header_timeout(edge: Server) -> None:
    with connect(edge) as sock:
        started = time.monotonic()
        assert answer(sock) == b""  # closed without an answer: it asked nothing
        assert time.monotonic() - started >= HEADER_TIMEOUT_S * 0.9


def test_a_slow_body_is_cut_after_the_body_timeout(edge: Server) -> None:
    body = CHAT + b" " * 200
    with connect(edge) as sock:
        sock.sendall(post_head(len(body)) + body[:10])
        started = time.monotonic()
        reply = b""
        for byte in body[10:]:
            try:
                sock.send(bytes([byte]))
            except OSError:
                break
            if select.select([sock], [], [], 0.1)[0]:
                reply = answer(sock)
                break
        elapsed = time.monotonic() - started
    assert status_of(reply) == 408, reply
    assert "body" in str(error_of(reply)["message"])
    assert BODY_TIMEOUT_S * 0.9 <= elapsed < BODY_TIMEOUT_S + 10


def test_idle_connections_make_room_for_a_normal_request(capped: Server) -> None:
    silent = [connect(capped) for _ in range(MAX_CONNECTIONS)]
    try:
        time.sleep(0.2)  # let the server accept them all
        assert answers_normally(capped)
        # the longest idle made room, long before its header timeout; the others stay
        readable, _, _ = select.select(silent, [], [], 5)
        assert readable == [silent[0]] and silent[0].recv(1) == b""
    finally:
        for sock in silent:
            sock.close()


def test_a_connection_beyond_a_full_cap_of_busy_ones_is_refused(capped: Server) -> None:
    busy = [connect(capped) for _ in range(MAX_CONNECTIONS)]
    try:
        for sock in busy:  # heads complete, bodies not: each is a request in flight
            sock.sendall(post_head(len(CHAT)) + CHAT[:5])
        time.sleep(0.2)
        with connect(capped) as extra:
            reply = answer(extra)
        assert status_of(reply) == 503
        assert b"retry-after: 1" in reply.lower()
    finally:
        for sock in busy:
            sock.close()
    assert eventually(lambda: answers_normally(capped))


def test_websockets_hold_their_places_until_they_close(capped: Server) -> None:
    url = capped.base_url.replace("http://", "ws://") + "/v1/responses"
    for _ in range(2):  # a second round: the first round's places were given back
        sockets = [websockets.sync.client.connect(url) for _ in range(MAX_CONNECTIONS)]
        try:
            with connect(capped) as extra:
                reply = answer(extra)
            assert status_of(reply) == 503  # an open WebSocket is never idle
        finally:
            for ws in sockets:
                ws.close()
        assert eventually(lambda: answers_normally(capped))


def test_the_connection_cap_fits_the_descriptor_limit(gateway_config: Path, tmp_path: Path) -> None:
    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (300, 300))

    command = [sys.executable, "-m", "gateway.cli", "serve", "--config", str(gateway_config)]
    log_path = tmp_path / "server.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [*command, "--port", str(free_port())],
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=low_limit,
        )
    try:
        assert eventually(lambda: "gateway_ready" in log_path.read_text(), timeout_s=60)
    finally:
        process.terminate()
        process.wait(timeout=30)
    line = next(x for x in log_path.read_text().splitlines() if "max_connections_lowered" in x)
    assert json.loads(line)["max_connections"] == (300 - 128) // 2


def test_requests_beyond_the_in_flight_cap_get_503(gateway_config: Path, tmp_path: Path) -> None:
    server = start_server(gateway_config, tmp_path / "server.log", args=["--max-in-flight", "2"])
    slow = [connect(server) for _ in range(2)]
    try:
        for sock in slow:
            sock.sendall(post_head(len(CHAT)) + CHAT[:5])
        time.sleep(0.2)
        refused = httpx.get(f"{server.api}/models", timeout=10)
        assert refused.status_code == 503
        assert refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["code"] == "overloaded"
        for sock in slow:
            sock.close()
        assert eventually(lambda: answers_normally(server))
    finally:
        for sock in slow:
            sock.close()
        stop_server(server)
