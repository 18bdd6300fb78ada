"""CORS for browser clients: off by default, configured origins answered, and composed with
the open-mode guard (listed origins pass it, ``*`` alone does not; with keys, a key does)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import Server, start_server, stop_server

APP = "https://app.example.com"
OTHER = "https://elsewhere.example.org"
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
MASTER_KEY = "sk-cors-test-master"


def _config(tmp_path: Path, tiny_model: Path, origins: str) -> Path:
    path = tmp_path / "cors.yaml"
    path.write_text(
        "deployments:\n"
        f"  - {{name: tiny-local, backend: llamacpp, model: '{tiny_model}', threads: 1}}\n"
        "models:\n  tiny: {candidates: [tiny-local]}\n"
        f"cors: {{allow_origins: {origins}}}\n"
    )
    return path


@pytest.fixture(scope="module")
def open_listed(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Open mode (no keys), one origin listed by name."""
    yield from _serve(tiny_model, tmp_path_factory, f"['{APP}']", key="")


@pytest.fixture(scope="module")
def open_wildcard(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Open mode, ``*``."""
    yield from _serve(tiny_model, tmp_path_factory, "['*']", key="")


@pytest.fixture(scope="module")
def keyed_wildcard(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """API keys configured, ``*``."""
    yield from _serve(tiny_model, tmp_path_factory, "['*']", key=MASTER_KEY)


def _serve(
    tiny_model: Path, factory: pytest.TempPathFactory, origins: str, key: str
) -> Iterator[Server]:
    folder = factory.mktemp("cors")
    config = _config(folder, tiny_model, origins)
    server = start_server(config, folder / "server.log", env={"SHUNTER_MASTER_KEY": key})
    yield server
    stop_server(server)


def preflight(server: Server, origin: str) -> httpx.Response:
    headers = {
        "Origin": origin,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os",
    }
    return httpx.options(f"{server.api}/chat/completions", headers=headers)


def chat(server: Server, origin: str, key: str | None = None) -> httpx.Response:
    headers = {"Origin": origin, **({"Authorization": f"Bearer {key}"} if key else {})}
    return httpx.post(f"{server.api}/chat/completions", json=CHAT, headers=headers, timeout=30)


def test_cors_is_off_by_default(server: Server) -> None:
    answer = preflight(server, APP)
    assert "access-control-allow-origin" not in answer.headers
    refused = chat(server, APP)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "origin_not_allowed"
    assert "access-control-allow-origin" not in refused.headers


def test_a_listed_origin_is_answered_in_open_mode(open_listed: Server) -> None:
    answer = preflight(open_listed, APP)
    assert answer.status_code in (200, 204)
    assert answer.headers["access-control-allow-origin"] == APP
    assert "POST" in answer.headers["access-control-allow-methods"]
    assert "x-stainless-os" in answer.headers["access-control-allow-headers"]
    served = chat(open_listed, APP)
    assert served.status_code == 200 and served.json()["choices"]
    assert served.headers["access-control-allow-origin"] == APP
    exposed = served.headers["access-control-expose-headers"]
    assert "x-request-id" in exposed and "x-shunter-deployment" in exposed
    refused = chat(open_listed, OTHER)
    assert refused.status_code == 403 and "access-control-allow-origin" not in refused.headers
    assert "access-control-allow-origin" not in preflight(open_listed, OTHER).headers


def test_a_wildcard_does_not_open_an_open_gateway_to_every_page(open_wildcard: Server) -> None:
    assert preflight(open_wildcard, OTHER).headers["access-control-allow-origin"] == "*"
    refused = chat(open_wildcard, OTHER)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "origin_not_allowed"
    assert refused.headers["access-control-allow-origin"] == "*"  # the page may read why
    local = chat(open_wildcard, "http://localhost:3000")
    assert local.status_code == 200 and local.headers["access-control-allow-origin"] == "*"


def test_with_keys_a_wildcard_serves_any_page_holding_a_key(keyed_wildcard: Server) -> None:
    assert preflight(keyed_wildcard, OTHER).headers["access-control-allow-origin"] == "*"
    served = chat(keyed_wildcard, OTHER, MASTER_KEY)
    assert served.status_code == 200 and served.headers["access-control-allow-origin"] == "*"
    assert chat(keyed_wildcard, OTHER).status_code == 401


def test_options_on_a_stored_response_lists_every_method_it_serves(open_listed: Server) -> None:
    url = f"{open_listed.api}/responses/resp_0123"
    plain = httpx.options(url)
    assert plain.status_code in (200, 204), plain.text
    allowed = {method.strip() for method in plain.headers["allow"].split(",")}
    assert {"GET", "DELETE"} <= allowed
    headers = {"Origin": APP, "Access-Control-Request-Method": "DELETE"}
    answer = httpx.options(url, headers=headers)
    assert answer.status_code in (200, 204) and answer.headers["access-control-allow-origin"] == APP
    assert "DELETE" in answer.headers["access-control-allow-methods"]
