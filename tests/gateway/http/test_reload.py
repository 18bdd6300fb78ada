"""Hot reload on a real server: valid edits apply to new requests, invalid ones are refused."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from tests.conftest import Server, start_server, stop_server

TEMPLATE = """
deployments:
  - {{name: {name}, backend: llamacpp, model: {model}, n_ctx: 4096, threads: 1}}
models:
  tiny: {{candidates: [{name}]}}
"""


def readiness(server: Server) -> dict[str, object]:
    body: dict[str, object] = httpx.get(f"{server.base_url}/health/readiness").json()
    return body


def wait_for_version_change(server: Server, old: object, timeout_s: float = 10.0) -> object:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        version = readiness(server)["config_version"]
        if version != old:
            return version
        time.sleep(0.1)
    raise AssertionError(f"config version stayed {old}:\n{server.log()}")


def test_edit_while_streaming_then_invalid_edit(tiny_model: Path, tmp_path: Path) -> None:
    config = tmp_path / "shunter.yaml"
    config.write_text(TEMPLATE.format(name="first", model=tiny_model))
    server = start_server(config, tmp_path / "server.log")
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2500}
    try:
        v1 = readiness(server)["config_version"]
        with httpx.stream(
            "POST", f"{server.api}/chat/completions", json={**body, "stream": True}, timeout=60
        ) as stream:
            assert stream.headers["x-shunter-deployment"] == "first"
            lines = stream.iter_lines()
            next(lines)
            config.write_text(TEMPLATE.format(name="second", model=tiny_model))
            v2 = wait_for_version_change(server, v1)
            after = httpx.post(f"{server.api}/chat/completions", json={**body, "max_tokens": 2})
            assert after.headers["x-shunter-deployment"] == "second"
            rest = [line for line in lines if line]
        assert rest[-1] == "data: [DONE]"  # the in-flight stream finished on the old deployment
        assert not [line for line in rest if '"error"' in line]

        config.write_text(TEMPLATE.format(name="third", model=tiny_model) + "  bogus: [\n")
        time.sleep(2.5)
        assert readiness(server)["config_version"] == v2
        still = httpx.post(f"{server.api}/chat/completions", json={**body, "max_tokens": 2})
        assert still.status_code == 200
        assert still.headers["x-shunter-deployment"] == "second"
        assert "config_rejected" in server.log() and f"{config}:" in server.log()
    finally:
        stop_server(server)
