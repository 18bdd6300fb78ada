"""What a web page could forge is refused: open mode serves loopback names and origins only,
and a POST to /v1 must be JSON with keys or without. Real `shunter serve` processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from gateway.common.origins import loopback_host, loopback_origin
from tests.conftest import Server, start_server, stop_server

MASTER = "sk-guard-test-master"
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
TEXT_CHAT = b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}'


@pytest.fixture(scope="module")
def keyed(gateway_config: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("keyed") / "server.log"
    srv = start_server(gateway_config, log, env={"SHUNTER_MASTER_KEY": MASTER})
    yield srv
    stop_server(srv)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        (b"localhost", True),
        (b"LOCALHOST:8000", True),
        (b"127.0.0.1:1", True),
        (b"[::1]", True),
        (b"[::1]:8000", True),
        (b"evil.example", False),
        (b"localhost.evil.example", False),
        (b"127.0.0.1.nip.io:8000", False),
        (b"localhost:80x", False),
        (b"[::1]x", False),
        (b"[::1", False),
        (b"", False),
    ],
)
def test_loopback_host_names(host: bytes, loopback: bool) -> None:
    assert loopback_host(host) is loopback


@pytest.mark.parametrize(
    ("origin", "loopback"),
    [
        (b"http://localhost:3000", True),
        (b"https://127.0.0.1", True),
        (b"http://[::1]:8080", True),
        (b"null", False),
        (b"https://evil.example", False),
        (b"file://localhost", False),
        (b"http://localhost:3000/path", False),
    ],
)
def test_loopback_origins(origin: bytes, loopback: bool) -> None:
    assert loopback_origin(origin) is loopback


def test_open_mode_refuses_a_foreign_host(server: Server) -> None:
    # what a DNS-rebinding page sends: its own name, resolved to 127.0.0.1
    reply = httpx.get(f"{server.api}/models", headers={"Host": "evil.example:8000"})
    assert reply.status_code == 403
    error = reply.json()["error"]
    assert error["code"] == "host_not_allowed"
    assert "SHUNTER_MASTER_KEY" in error["message"]
    for name in ("localhost", "127.0.0.1", "[::1]"):
        port = server.base_url.rsplit(":", 1)[1]
        ok = httpx.get(f"{server.api}/models", headers={"Host": f"{name}:{port}"})
        assert ok.status_code == 200


def test_open_mode_refuses_a_foreign_origin(server: Server) -> None:
    headers = {"Origin": "https://evil.example"}
    reply = httpx.post(f"{server.api}/chat/completions", json=CHAT, headers=headers)
    assert reply.status_code == 403
    assert reply.json()["error"]["code"] == "origin_not_allowed"
    headers = {"Origin": "http://localhost:3000"}
    ok = httpx.post(f"{server.api}/chat/completions", json=CHAT, headers=headers, timeout=30)
    assert ok.status_code == 200


@pytest.mark.parametrize(
    "content_type",
    [
        "text/plain",
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        None,
    ],
)
def test_a_body_that_is_not_declared_json_is_never_parsed(
    server: Server, content_type: str | None
) -> None:
    # the forms a page may send cross-origin without a preflight
    headers = {} if content_type is None else {"Content-Type": content_type}
    reply = httpx.post(f"{server.api}/chat/completions", content=TEXT_CHAT, headers=headers)
    assert reply.status_code == 415
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "application/json" in error["message"]


def test_json_with_parameters_is_json(server: Server) -> None:
    headers = {"Content-Type": "Application/JSON; charset=utf-8"}
    reply = httpx.post(
        f"{server.api}/chat/completions", content=TEXT_CHAT, headers=headers, timeout=30
    )
    assert reply.status_code == 200


def test_the_openai_sdk_is_served_in_open_mode(server: Server) -> None:
    port = server.base_url.rsplit(":", 1)[1]
    for base in (server.api, f"http://localhost:{port}/v1"):
        with OpenAI(base_url=base, api_key="unused", max_retries=0) as client:
            out = client.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2
            )
        assert out.usage is not None and out.usage.completion_tokens == 2


def test_with_keys_any_host_and_origin_may_call(keyed: Server) -> None:
    headers = {
        "Host": "gateway.example.com",
        "Origin": "https://app.example.com",
        "Authorization": f"Bearer {MASTER}",
    }
    assert httpx.get(f"{keyed.api}/models", headers=headers).status_code == 200
    with OpenAI(base_url=keyed.api, api_key=MASTER, max_retries=0) as client:
        out = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
        assert out.choices


def test_with_keys_a_text_body_is_still_refused(keyed: Server) -> None:
    headers = {"Content-Type": "text/plain", "Authorization": f"Bearer {MASTER}"}
    reply = httpx.post(f"{keyed.api}/chat/completions", content=TEXT_CHAT, headers=headers)
    assert reply.status_code == 415
