"""Where spans go: ``OTEL_EXPORTER_OTLP_PROTOCOL`` is honoured (gRPC to a real gRPC
receiver), refused at start when it cannot be, and the console exporter writes one JSON
line per span to standard output, apart from the log lines on standard error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from gateway.telemetry.exporters import TelemetryConfigError, exporters_from_env
from tests.conftest import free_port
from tests.fixtures.fault_upstream import FaultUpstream
from tests.gateway.telemetry.otlp_receiver import OTLPReceiver

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def _config(path: Path, upstream: FaultUpstream) -> Path:
    path.write_text(
        f"""
deployments:
  - {{name: up, backend: openai, base_url: "{upstream.url}", model: fake-model}}
models:
  m: {{candidates: [up]}}
"""
    )
    return path


def _serve(config: Path, tmp: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    """``shunter serve`` with its standard output and standard error in separate files."""
    port = free_port()
    command = [sys.executable, "-m", "gateway.cli", "serve", "--config", str(config)]
    with (tmp / "out").open("wb") as out, (tmp / "err").open("wb") as err:
        process = subprocess.Popen(
            [*command, "--port", str(port)],
            stdout=out,
            stderr=err,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
        )
    return process, f"http://127.0.0.1:{port}"


def _ready(process: subprocess.Popen[bytes], base: str, timeout_s: float = 60) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(f"{base}/health/readiness", timeout=1).status_code == 200:
                return True
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    return False


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def test_grpc_exports_over_grpc_and_console_lines_stay_off_the_log(tmp_path: Path) -> None:
    with FaultUpstream() as upstream, OTLPReceiver("grpc") as receiver:
        env = {
            "OTEL_TRACES_EXPORTER": "otlp,console",
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "OTEL_BSP_SCHEDULE_DELAY": "50",
        }
        process, base = _serve(_config(tmp_path / "c.yaml", upstream), tmp_path, env)
        try:
            assert _ready(process, base), (tmp_path / "err").read_text()
            answer = httpx.post(f"{base}/v1/chat/completions", json=BODY, timeout=10)
            assert answer.status_code == 200
            spans = receiver.wait_for(lambda s: {x.kind for x in s} >= {"server", "client"})
            assert {s.name for s in spans} >= {"chat m", "chat fake-model"}
        finally:
            _stop(process)
    out = (tmp_path / "out").read_text().splitlines()
    err = (tmp_path / "err").read_text().splitlines()
    printed = [json.loads(line) for line in out if line.strip()]
    assert {span["name"] for span in printed} >= {"chat m", "chat fake-model"}
    logged = [json.loads(line) for line in err if line.startswith("{")]
    assert any(line.get("event") == "request" for line in logged)
    assert not any('"span_id"' in line for line in err)  # no span in the log stream


def test_an_unsupported_protocol_stops_the_start_with_its_name(tmp_path: Path) -> None:
    with FaultUpstream() as upstream:
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
        }
        process, _ = _serve(_config(tmp_path / "c.yaml", upstream), tmp_path, env)
        try:
            process.wait(timeout=60)
        finally:
            _stop(process)
    assert process.returncode != 0
    text = (tmp_path / "err").read_text()
    assert "OTEL_EXPORTER_OTLP_PROTOCOL='http/json' is not supported" in text
    assert "Traceback" not in text


@pytest.mark.parametrize(
    ("env", "kinds"),
    [
        ({}, []),  # no endpoint: nothing exports
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, ["HTTP"]),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            },
            ["GRPC"],
        ),
        (  # the traces-specific variable wins
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            },
            ["HTTP"],
        ),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:1"}, []),
        ({"OTEL_TRACES_EXPORTER": "console"}, ["Console"]),
    ],
)
def test_exporters_follow_the_environment(env: dict[str, str], kinds: list[str]) -> None:
    found = exporters_from_env(env)
    assert [_kind(e) for e in found] == kinds
    for exporter in found:
        exporter.shutdown()


def _kind(exporter: object) -> str:
    module = type(exporter).__module__
    if ".grpc." in module:
        return "GRPC"
    if ".http." in module:
        return "HTTP"
    return "Console"


def test_unknown_exporters_are_refused() -> None:
    with pytest.raises(TelemetryConfigError, match="OTEL_TRACES_EXPORTER='zipkin'"):
        exporters_from_env({"OTEL_TRACES_EXPORTER": "zipkin"})
