"""`serve` and `worker` bind beyond loopback only with keys or `--allow-open`, and the
connection limits are flags of both."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.cli.main import _parser
from gateway.http.edge import EdgeLimits

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
