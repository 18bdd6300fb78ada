"""A real ``redis-server`` for tests: a free loopback port, a temp dir, no persistence.

It can be stopped and started again on the same port (the outage tests do that). Tests
never touch a Redis already running on 6379. A missing binary is a test failure with
instructions, never a skip.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.conftest import free_port

INSTALL_HINT = (
    "redis-server is not installed; the state tests need a real one. "
    "Install it with `apt-get install -y redis-server` (Debian/Ubuntu) and run the tests again."
)


class RedisServer:
    """One ``redis-server`` process bound to 127.0.0.1:``port`` with its files in ``directory``."""

    def __init__(
        self,
        directory: Path,
        *,
        cluster: bool = False,
        own_slots: bool = True,
        extra: Sequence[str] = (),
    ) -> None:
        """``cluster``: a cluster node, which takes every slot itself unless ``own_slots``
        is false (a node of a larger cluster); ``extra``: more ``redis-server`` options."""
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(INSTALL_HINT)
        self.binary = binary
        self.directory = directory
        self.cluster = cluster
        self.own_slots = own_slots
        self.extra = tuple(extra)
        # a cluster node also listens on port + 10000, so its port must stay below 55536
        self.port = _free_port_below(55535) if cluster else free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        """Start (or start again, on the same port) and wait until it answers PING."""
        if self.process is not None:
            raise RuntimeError("redis-server is already running")
        command = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.directory),
            "--daemonize",
            "no",
            "--protected-mode",
            "yes",
        ]
        if self.cluster:
            command += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
        command += self.extra
        log = (self.directory / "redis.log").open("ab")
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.process = None
                raise RuntimeError(f"redis-server exited at start:\n{self.log()}")
            if (self.command("PING") or "").startswith("+PONG"):
                if self.cluster and self.own_slots:
                    self._own_all_slots(deadline)
                return self
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"redis-server did not answer in {timeout_s}s:\n{self.log()}")

    def stop(self) -> None:
        """Stop the process (it keeps nothing: no RDB, no AOF)."""
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    def kill(self) -> None:
        """End the process at once (SIGKILL), as a crash would."""
        if self.process is None:
            return
        self.process.kill()
        self.process.wait()
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def command(self, *parts: str) -> str | None:
        """Send one command over a raw socket; the raw reply, or None if unreachable."""
        payload = f"*{len(parts)}\r\n" + "".join(f"${len(p)}\r\n{p}\r\n" for p in parts)
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(payload.encode())
                return sock.recv(65536).decode(errors="replace")
        except OSError:
            return None

    def log(self) -> str:
        path = self.directory / "redis.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def create_key(self, *args: str) -> str:
        """A virtual key made by ``shunter keys create`` (``args``: its flags) in this store."""
        command = [sys.executable, "-m", "gateway.cli", "keys", "create", "--redis-url", self.url]
        result = subprocess.run(
            [*command, *args], capture_output=True, text=True, timeout=60, check=True
        )
        return result.stdout.strip().splitlines()[-1]

    def _own_all_slots(self, deadline: float) -> None:
        # a one-node cluster: enough for Redis to enforce CROSSSLOT on every command
        self.command("CLUSTER", "ADDSLOTSRANGE", "0", "16383")
        while time.monotonic() < deadline:
            if "cluster_state:ok" in (self.command("CLUSTER", "INFO") or ""):
                return
            time.sleep(0.02)
        raise RuntimeError("one-node redis cluster did not reach cluster_state:ok")


def start_redis(directory: Path, *, cluster: bool = False) -> RedisServer:
    """A started redis-server; a missing binary fails the calling test with instructions."""
    try:
        return RedisServer(directory, cluster=cluster).start()
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)


def _free_port_below(limit: int) -> int:
    for _ in range(200):
        port = random.randint(20000, limit)
        with socket.socket() as sock, contextlib.suppress(OSError):
            sock.bind(("127.0.0.1", port))
            with socket.socket() as bus:
                bus.bind(("127.0.0.1", port + 10000))
                return port
    raise RuntimeError(f"no free port pair below {limit}")
