"""The status page's sign-in and sessions on a real ``shunter serve`` with keys in a real
redis-server: bounded forms, sessions ended on the server, throttled guesses, and cookies
of any shape refused cleanly."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.fault_upstream import FaultUpstream
from tests.redis_server import start_redis

MASTER = "sk-master-ui-sessions"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("ui-sessions")
    redis = start_redis(folder)
    config = folder / "shunter.yaml"
    with FaultUpstream() as upstream:
        config.write_text(
            "deployments:\n"
            f"  - {{name: remote, backend: openai, base_url: '{upstream.url}', model: up}}\n"
            "models:\n  chat: {candidates: [remote]}\n"
        )
        env = {"SHUNTER_REDIS_URL": redis.url, "SHUNTER_MASTER_KEY": MASTER}
        srv = start_server(config, Path(folder) / "server.log", env=env)
        try:
            yield srv
        finally:
            stop_server(srv)
            redis.stop()


def test_uptime_counts_from_the_start_not_from_the_first_view(server: Server) -> None:
    time.sleep(1.5)  # the first look at the page comes well after the start
    headers = {"authorization": f"Bearer {MASTER}"}
    status = httpx.get(f"{server.base_url}/ui/status.json", headers=headers).json()
    assert status["gateway"]["uptime_s"] >= 1.5


def test_a_signed_out_session_is_ended_on_the_server(server: Server) -> None:
    with httpx.Client(base_url=server.base_url) as client:
        assert client.post("/ui/login", data={"key": MASTER}).status_code == 303
        cookie = client.cookies["shunter_ui"]
        assert client.get("/ui/panel").status_code == 200
        assert client.post("/ui/logout").status_code == 303
    # the cookie as it was before sign-out, sent again (a copy kept elsewhere)
    with httpx.Client(base_url=server.base_url, cookies={"shunter_ui": cookie}) as replay:
        assert replay.get("/ui/panel").status_code == 401


@pytest.mark.parametrize(
    "value", ["9" * 5000, "9" * 5000 + ".ab.cd", "1.2.3", "-5.ab.cd", "\u0661\u0662.a.b", "."]
)
def test_a_malformed_cookie_is_401_not_an_error(server: Server, value: str) -> None:
    headers = {"cookie": b"shunter_ui=" + value.encode()}  # a client may send any bytes
    answer = httpx.get(f"{server.base_url}/ui/panel", headers=headers)
    assert answer.status_code == 401


def test_a_large_sign_in_form_is_refused_before_it_is_read(server: Server) -> None:
    port = int(server.base_url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        # ten megabytes announced, a few bytes sent: the answer comes without the rest
        sock.sendall(
            b"POST /ui/login HTTP/1.1\r\nhost: 127.0.0.1\r\n"
            b"content-type: application/x-www-form-urlencoded\r\n"
            b"content-length: 10000000\r\n\r\nkey=sk-"
        )
        assert sock.recv(4096).startswith(b"HTTP/1.1 413")

    # without a length announced, reading stops past 4 KB
    def chunks() -> Iterator[bytes]:
        yield b"key=" + b"x" * 4096
        yield b"x" * 1_000_000

    answer = httpx.post(
        f"{server.base_url}/ui/login",
        content=chunks(),
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert answer.status_code == 413


def test_sign_in_guesses_are_throttled_per_address(server: Server) -> None:
    with httpx.Client(base_url=server.base_url) as client:
        codes = [client.post("/ui/login", data={"key": f"sk-{i}"}).status_code for i in range(15)]
        assert codes[:5] == [401] * 5 and codes[-1] == 429
        refused = client.post("/ui/login", data={"key": MASTER})
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
