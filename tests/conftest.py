"""Shared fixtures: a generated tiny GGUF and a real `shunter serve` process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from gateway.models.demo import write_demo_model

LONGEST_FIRST = (
    "tests/test_wheel.py",
    "tests/policies/test_policy_fast.py",
    "tests/test_readme.py",
    "tests/gateway/http/test_registry_edge.py",
)
"""Test files that take minutes each: collected first, so that the test command's
processes (one file each at a time) start them first rather than end on them."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: not item.nodeid.startswith(LONGEST_FIRST))  # a stable sort


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Server:
    base_url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def api(self) -> str:
        return f"{self.base_url}/v1"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def start_server(
    config: Path,
    log_path: Path,
    timeout_s: float = 60.0,
    env: dict[str, str] | None = None,
    args: Sequence[str] = (),
) -> Server:
    """Start `shunter serve` (plus ``args``) on a free loopback port; wait until it is ready.

    A free port can be taken by another test's server between the choice and the bind: the
    server then says the port is held, and it is started again on another. It counts as
    ready only once its own log says it listens, so another server answering on that port
    is never taken for it."""
    for _ in range(PORT_TRIES - 1):
        try:
            return _start_once(config, log_path, timeout_s, env, args)
        except PortTakenError:
            continue
    return _start_once(config, log_path, timeout_s, env, args)


PORT_TRIES = 3


class PortTakenError(RuntimeError):
    """The port chosen for a server was bound by another process first."""


def _start_once(
    config: Path,
    log_path: Path,
    timeout_s: float,
    env: dict[str, str] | None,
    args: Sequence[str],
) -> Server:
    port = free_port()
    command = [sys.executable, "-m", "gateway.cli", "serve", "--config", str(config)]
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [*command, "--port", str(port), *args],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        )
    server = Server(f"http://127.0.0.1:{port}", process, log_path)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            text = server.log()
            if f"another process holds port {port}" in text:
                raise PortTakenError(text)
            raise RuntimeError(f"server exited with {process.returncode}:\n{text}")
        try:
            if _ready(server):
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    stop_server(server)
    raise RuntimeError(f"server not ready after {timeout_s}s:\n{server.log()}")


def _ready(server: Server) -> bool:
    """Whether the server answers ready, from its own process or one of its workers."""
    answer = httpx.get(f"{server.base_url}/health/readiness", timeout=1)
    if answer.status_code != 200:
        return False
    pid = answer.json().get("pid")
    if pid is None:  # readiness kept from callers without the master key: the log says
        return _bound(server)
    return pid == server.process.pid or _parent(pid) == server.process.pid


def _bound(server: Server) -> bool:
    """Whether the server's own log says it holds its port (one process, or the parent of
    its workers)."""
    own = f'"pid": {server.process.pid},'
    return any(
        '"event": "listening"' in line or ("workers_started" in line and own in line)
        for line in server.log().splitlines()
    )


def _parent(pid: object) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state


def stop_server(server: Server) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_demo_model(tmp_path_factory.mktemp("models") / "tiny.gguf", "tiny")


@pytest.fixture(scope="session")
def gateway_config(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("config") / "shunter.yaml"
    path.write_text(
        f"""
deployments:
  - name: tiny-local
    backend: llamacpp
    model: {tiny_model}
    n_ctx: 4096
    threads: 1   # a shared 2-core runner: ggml threads spin-wait on each other otherwise
    parallel: 2
    max_queue: 16
models:
  tiny:
    candidates: [tiny-local]
"""
    )
    return path


@pytest.fixture(scope="session")
def server(gateway_config: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(gateway_config, tmp_path_factory.mktemp("logs") / "server.log")
    yield srv
    stop_server(srv)
