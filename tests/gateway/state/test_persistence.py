"""Keys and stored state survive a Redis crash when Redis runs as the shipped compose file
and Kubernetes manifests run it: a real redis-server started with their arguments, killed
(SIGKILL, no chance to save) and started again on the same data directory."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gateway.state.redis import RedisStateStore
from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[3]


def compose_args() -> list[str]:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    command: list[str] = compose["services"]["redis"]["command"]
    return command[1:]


def kubernetes_args() -> list[str]:
    documents = yaml.safe_load_all((ROOT / "deploy/kubernetes/base/redis.yaml").read_text())
    deployment = next(d for d in documents if d["kind"] == "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args: list[str] = container["args"]
    return args[1:]


class Redis:
    """redis-server with the shipped arguments, on a loopback port and a data directory."""

    def __init__(self, args: list[str], directory: Path) -> None:
        self.args, self.directory, self.port = args, directory, free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        assert binary is not None, "redis-server is not installed"
        local = ["--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.directory)]
        log = (self.directory / "redis.log").open("ab")
        self.process = subprocess.Popen([binary, *self.args, *local], stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + 20
        while not asyncio.run(self._ping()):
            assert time.monotonic() < deadline, (self.directory / "redis.log").read_text()
            time.sleep(0.05)

    def crash(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        self.process = None

    async def _ping(self) -> bool:
        store = RedisStateStore.from_url(self.url)
        try:
            return await store.ping()
        finally:
            await store.aclose()


@pytest.fixture(params=["compose", "kubernetes"])
def redis(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Redis]:
    args = compose_args() if request.param == "compose" else kubernetes_args()
    server = Redis(args, tmp_path)
    server.start()
    yield server
    if server.process is not None:
        server.crash()


def keys_cli(redis: Redis, *args: str) -> str:
    command = [sys.executable, "-m", "gateway.cli", "keys", *args, "--redis-url", redis.url]
    return subprocess.run(command, capture_output=True, text=True, check=True, timeout=60).stdout


def test_keys_and_stored_values_survive_a_crash(redis: Redis) -> None:
    keys_cli(redis, "create", "--name", "kept")

    async def store_a_value() -> None:
        store = RedisStateStore.from_url(redis.url)
        try:
            await store.shared_set(
                "response:resp_kept", "{}", ttl_s=3600
            )  # as stored responses are
        finally:
            await store.aclose()

    asyncio.run(store_a_value())
    time.sleep(1.5)  # the append-only file is flushed every second
    redis.crash()
    redis.start()
    names = [json.loads(line)["name"] for line in keys_cli(redis, "list", "--json").splitlines()]
    assert names == ["kept"]

    async def stored() -> str | None:
        store = RedisStateStore.from_url(redis.url)
        try:
            return await store.shared_get("response:resp_kept")
        finally:
            await store.aclose()

    assert asyncio.run(stored()) == "{}"
