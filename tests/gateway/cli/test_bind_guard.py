"""`serve` and `worker` bind beyond loopback only with keys or `--allow-open`, and the
connection limits are flags of both."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.cli.commands import _parser
from gateway.http.edge import EdgeLimits
from tests.conftest import start_server, stop_server

NO_KEYS = {
    k: v for k, v in os.environ.items() if k not in ("SHUNTER_MASTER_KEY", "SHUNTER_REDIS_URL")
}


def shunter(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "gateway.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, env=env or NO_KEYS)


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_a_non_loopback_bind_without_keys_is_refused(command: str, tiny_model: Path) -> None:
    args = ["--model", str(tiny_model)] if command == "worker" else []
    done = shunter(command, *args, "--host", "0.0.0.0", "--port", "1")
    assert done.returncode == 2
    assert "refusing to serve 0.0.0.0 without API keys" in done.stderr
    assert "--allow-open" in done.stderr and "SHUNTER_MASTER_KEY" in done.stderr


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_a_taken_port_is_refused_before_the_model_loads(
    command: str, tiny_model: Path, gateway_config: Path
) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        args = (
            ["--model", str(tiny_model)]
            if command == "worker"
            else ["--config", str(gateway_config)]
        )
        done = shunter(command, *args, "--port", str(port))
    assert done.returncode == 2, done.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert f"another process holds port {port}" in done.stderr
    assert "--port" in done.stderr
    assert "model_loaded" not in done.stderr and "gateway_ready" not in done.stderr


def test_a_free_port_is_held_while_the_model_loads(gateway_config: Path, tmp_path: Path) -> None:
    """The gateway says where it listens before it loads, and answers there once ready."""
    server = start_server(gateway_config, tmp_path / "server.log")
    try:
        lines = server.log().splitlines()
        listening = next(i for i, line in enumerate(lines) if '"listening"' in line)
        loaded = next(i for i, line in enumerate(lines) if '"model_loaded"' in line)
        assert listening < loaded
        assert server.base_url in lines[listening]
    finally:
        stop_server(server)


def test_worker_allow_open_warns_that_it_is_open(tiny_model: Path) -> None:
    # a socket bound, not listening, holds the port: the worker gets as far as binding it,
    # fails there, and nothing on the network could reach it meanwhile
    with socket.socket() as blocker:
        blocker.bind(("0.0.0.0", 0))
        port = str(blocker.getsockname()[1])
        done = shunter(
            "worker", "--model", str(tiny_model), "--threads", "1",
            "--host", "0.0.0.0", "--port", port, "--allow-open",
        )  # fmt: skip
    line = next(x for x in done.stderr.splitlines() if "open_to_network" in x)
    assert '"level": "warning"' in line and "anyone" in line


def test_limits_are_flags_with_documented_defaults(tiny_model: Path) -> None:
    serve = _parser().parse_args(["serve"])
    defaults = EdgeLimits()
    assert serve.max_header_bytes == defaults.max_header_bytes == 65536
    assert serve.header_timeout == defaults.header_timeout_s == 10.0
    assert serve.body_timeout == defaults.body_timeout_s == 30.0
    assert serve.max_connections == defaults.max_connections
    assert serve.max_in_flight == defaults.max_in_flight
    worker = _parser().parse_args(
        ["worker", "--model", str(tiny_model), "--header-timeout", "500ms", "--body-timeout", "2"]
    )
    assert (worker.header_timeout, worker.body_timeout) == (0.5, 2.0)


@pytest.mark.parametrize(
    "bad", [["--header-timeout", "0s"], ["--body-timeout", "soon"], ["--max-connections", "0"]]
)
def test_bad_limits_are_refused(bad: list[str]) -> None:
    with pytest.raises(SystemExit):
        _parser().parse_args(["serve", *bad])
