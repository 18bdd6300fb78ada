"""A request answered from its headers alone (401: no key) while its body still trickles
in, against a real `shunter serve` with keys and a small connection cap, over raw sockets:
the answer closes the connection, so such requests cannot hold the server's places."""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import Server, start_server, stop_server

MAX_CONNECTIONS = 4
MASTER = "sk-master-edge"


@pytest.fixture(scope="module")
def keyed(gateway_config: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Keys on, few connections, the default 30 s body timeout."""
    log = tmp_path_factory.mktemp("early") / "server.log"
    args = ["--max-connections", str(MAX_CONNECTIONS)]
    srv = start_server(gateway_config, log, env={"SHUNTER_MASTER_KEY": MASTER}, args=args)
    yield srv
    stop_server(srv)


def trickling(server: Server) -> socket.socket:
    """A keyless POST whose head is whole and whose body has only begun."""
    host, port = server.base_url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\n"
        b'Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"model"'
    )
    return sock


def head_of(sock: socket.socket) -> bytes:
    sock.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data and (chunk := sock.recv(4096)):
        data += chunk
    return data.partition(b"\r\n\r\n")[0].lower()


def test_an_early_answer_closes_the_connection_and_frees_its_place(keyed: Server) -> None:
    socks = [trickling(keyed) for _ in range(MAX_CONNECTIONS)]
    try:
        for sock in socks:
            head = head_of(sock)
            assert head.startswith(b"http/1.1 401") and b"connection: close" in head
        for sock in socks:  # the body keeps coming, as from a slow client
            sock.send(b" ")
        # every place is taken by a trickling request, yet a new client is served at once
        key = {"authorization": f"Bearer {MASTER}"}
        assert httpx.get(f"{keyed.api}/models", headers=key, timeout=10).status_code == 200
        # and the connections end soon after their answer, not at the body timeout (30 s)
        started = time.monotonic()
        open_ones = list(socks)
        while open_ones and time.monotonic() - started < 10:
            readable, _, _ = select.select(open_ones, [], [], 0.5)
            for sock in readable:
                try:
                    ended = sock.recv(65536) == b""
                except ConnectionResetError:
                    ended = True
                if ended:
                    open_ones.remove(sock)
        assert not open_ones
    finally:
        for sock in socks:
            sock.close()
