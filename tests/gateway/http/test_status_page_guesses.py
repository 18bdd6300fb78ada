"""Guessing the master key at the status page, on real ``shunter serve`` processes with
keys in a real redis-server: a guess sent as ``Authorization: Bearer`` is throttled as a
form's is, per client address; the address comes from ``X-Forwarded-For`` only where the
peer is a configured proxy (loopback is not one by default); and the admin signing in from
another address, or signing in again and again, is never refused for someone's guesses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.fault_upstream import FaultUpstream
from tests.redis_server import start_redis

MASTER = "sk-master-ui-guesses"
GUESSES = 15


def _serve(folder: Path, http: str) -> Iterator[Server]:
    redis = start_redis(folder)
    config = folder / "shunter.yaml"
    with FaultUpstream() as upstream:
        config.write_text(
            "deployments:\n"
            f"  - {{name: remote, backend: openai, base_url: '{upstream.url}', model: up}}\n"
            f"models:\n  chat: {{candidates: [remote]}}\n{http}"
        )
        env = {"SHUNTER_REDIS_URL": redis.url, "SHUNTER_MASTER_KEY": MASTER}
        srv = start_server(config, folder / "server.log", env=env)
        try:
            yield srv
        finally:
            stop_server(srv)
            redis.stop()


@pytest.fixture(scope="module")
def behind_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A gateway told that its loopback peer is a reverse proxy."""
    yield from _serve(
        tmp_path_factory.mktemp("behind-proxy"), "http: {trusted_proxies: [127.0.0.1]}\n"
    )


@pytest.fixture(scope="module")
def direct(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A gateway with no proxy configured (the default)."""
    yield from _serve(tmp_path_factory.mktemp("direct"), "")


def status(server: Server, key: str, forwarded_for: str | None = None) -> int:
    headers = {"authorization": f"Bearer {key}"}
    if forwarded_for is not None:
        headers["x-forwarded-for"] = forwarded_for
    return httpx.get(f"{server.base_url}/ui/status.json", headers=headers).status_code


def test_bearer_guesses_are_throttled_per_address(behind_proxy: Server) -> None:
    # what the client writes before the proxy's own entry changes nothing
    codes = [status(behind_proxy, f"sk-{i}", f"198.51.100.{i}, 10.0.0.66") for i in range(GUESSES)]
    print(f"{GUESSES} Bearer guesses: {codes.count(401)} x 401, {codes.count(429)} x 429")
    assert codes[:5] == [401] * 5 and codes[-1] == 429
    assert status(behind_proxy, MASTER, "10.0.0.66") == 429  # the guesser's address waits


def test_the_admin_elsewhere_is_never_refused_for_the_guesses(behind_proxy: Server) -> None:
    codes = [status(behind_proxy, f"sk-{i}", "10.0.0.77") for i in range(GUESSES)]
    assert codes[-1] == 429
    # the admin, at another address, signs in by the form and by Bearer as often as it likes
    headers = {"x-forwarded-for": "10.0.0.1"}
    with httpx.Client(base_url=behind_proxy.base_url, headers=headers) as admin:
        signed = [admin.post("/ui/login", data={"key": MASTER}).status_code for _ in range(15)]
        assert signed == [303] * 15
    assert [status(behind_proxy, MASTER, "10.0.0.1") for _ in range(GUESSES)] == [200] * GUESSES


def test_forwarded_for_from_loopback_is_not_trusted_by_default(direct: Server) -> None:
    # a new X-Forwarded-For per guess would make each its own client if it were believed
    codes = [status(direct, f"sk-{i}", f"203.0.113.{i}") for i in range(GUESSES)]
    print(f"{GUESSES} guesses, each naming another address: {codes.count(429)} x 429")
    assert codes[:5] == [401] * 5 and codes[-1] == 429
