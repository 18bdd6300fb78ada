"""SIGTERM drains: in-flight streams finish, readiness turns 503, the process exits 0."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import httpx

from tests.conftest import start_server


def test_sigterm_lets_an_in_flight_stream_finish(gateway_config: Path, tmp_path: Path) -> None:
    server = start_server(gateway_config, tmp_path / "server.log")
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 1500,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    try:
        with httpx.stream("POST", f"{server.api}/chat/completions", json=body, timeout=60) as r:
            lines = r.iter_lines()
            assert next(lines).startswith("data: ")
            server.process.send_signal(signal.SIGTERM)
            rest = [line for line in lines if line]
        assert rest[-1] == "data: [DONE]"
        usage = json.loads(rest[-2].removeprefix("data: "))["usage"]
        assert usage["completion_tokens"] == 1500
        assert server.process.wait(timeout=30) == 0
        log = server.log()
        assert "Shutting down" in log
    finally:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait()


def test_draining_gateway_refuses_new_work(gateway_config: Path, tmp_path: Path) -> None:
    server = start_server(gateway_config, tmp_path / "server.log")
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4000}
    try:
        with httpx.Client(timeout=60) as streaming, httpx.Client(timeout=5) as other:
            assert other.get(f"{server.base_url}/health/readiness").status_code == 200
            slow = {**body, "stream": True}
            with streaming.stream("POST", f"{server.api}/chat/completions", json=slow) as r:
                lines = r.iter_lines()
                next(lines)
                server.process.send_signal(signal.SIGTERM)
                time.sleep(0.3)
                # new work is refused: 503 on a kept-alive connection, or no connection
                for path in ("/health/readiness", "/v1/chat/completions"):
                    try:
                        status = other.post(f"{server.base_url}{path}", json=body).status_code
                    except httpx.TransportError:
                        status = None
                    assert status in (None, 503, 405)
                tail = [line for line in lines if line]
            assert tail[-1] == "data: [DONE]"
        assert server.process.wait(timeout=30) == 0
    finally:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait()
