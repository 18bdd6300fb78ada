"""``http.protect_ops``: the operations endpoints behind the master key, on a real
`shunter serve`. Probes keep working: liveness is public, readiness answers its status."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.fault_upstream import FaultUpstream

MASTER = "sk-master-protect-ops"


def config(folder: Path, upstream: FaultUpstream, protect: bool) -> Path:
    path = folder / "shunter.yaml"
    path.write_text(
        f"http: {{protect_ops: {str(protect).lower()}}}\n"
        "deployments:\n"
        f"  - {{name: a, backend: openai, base_url: '{upstream.url}', model: up}}\n"
        "models:\n  m: {candidates: [a]}\n"
    )
    return path


@pytest.fixture(scope="module")
def upstream() -> Iterator[FaultUpstream]:
    with FaultUpstream() as server:
        yield server


@pytest.fixture(scope="module")
def protected(
    upstream: FaultUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("protect-ops")
    env = {"SHUNTER_MASTER_KEY": MASTER}
    server = start_server(config(folder, upstream, True), folder / "server.log", env=env)
    yield server
    stop_server(server)


def get(server: Server, path: str, key: str | None = None) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return httpx.get(f"{server.base_url}{path}", headers=headers, timeout=30)


def test_metrics_need_the_master_key(protected: Server) -> None:
    for key in (None, "sk-not-the-master"):
        refused = get(protected, "/metrics", key)
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "invalid_api_key"
        assert "shunter_" not in refused.text
    allowed = get(protected, "/metrics", MASTER)
    assert allowed.status_code == 200 and "shunter_" in allowed.text


def test_readiness_shows_only_its_status_without_the_master_key(protected: Server) -> None:
    public = get(protected, "/health/readiness")
    assert public.status_code == 200
    assert public.json() == {"status": "ready"}
    full = get(protected, "/health/readiness", MASTER).json()
    assert full["status"] == "ready" and "a" in full["deployments"] and full["config_version"]
    assert get(protected, "/health/liveness").status_code == 200


def test_by_default_the_operations_endpoints_are_public(
    upstream: FaultUpstream, tmp_path: Path
) -> None:
    server = start_server(
        config(tmp_path, upstream, False),
        tmp_path / "server.log",
        env={"SHUNTER_MASTER_KEY": MASTER},
    )
    try:
        assert get(server, "/metrics").status_code == 200
        assert "deployments" in get(server, "/health/readiness").json()
    finally:
        stop_server(server)
