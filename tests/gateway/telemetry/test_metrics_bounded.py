"""/metrics stays bounded whatever clients send, on a real ``shunter serve``: model names
the config does not serve count as ``unknown``, a deployment's own 429s and the upstream
errors it relays count under that deployment, every series says which operation it is,
and route decisions are counted by the policy step that made them."""

from __future__ import annotations

import random
import string
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.fault_upstream import FaultUpstream

CHAT = {"messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def upstream() -> Iterator[FaultUpstream]:
    with FaultUpstream() as fake:
        yield fake


@pytest.fixture(scope="module")
def server(upstream: FaultUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("bounded")
    config = tmp / "c.yaml"
    url = upstream.url
    config.write_text(
        f"""
deployments:
  - {{name: up, backend: openai, base_url: "{url}", model: fake-model, embeddings: true}}
  - {{name: capped, backend: openai, base_url: "{url}", model: fake-model, rpm: 1}}
models:
  m: {{candidates: [up]}}
  slow: {{candidates: [capped]}}
"""
    )
    srv = start_server(Path(config), tmp / "log")
    yield srv
    stop_server(srv)


def _samples(
    server: Server, name: str, ready: Callable[[list[dict[str, str]]], bool] = bool
) -> list[dict[str, str]]:
    """``name``'s samples once ``ready`` says they hold what the test sent: a request is
    counted after its last byte is sent, a moment after the client may have read it."""
    deadline = time.monotonic() + 10
    while True:
        text = httpx.get(f"{server.base_url}/metrics").text
        out = []
        for family in text_string_to_metric_families(text):
            out += [dict(s.labels, value=str(s.value)) for s in family.samples if s.name == name]
        if ready(out) or time.monotonic() > deadline:
            return out
        time.sleep(0.05)


def test_random_model_names_make_no_new_series(server: Server) -> None:
    names = {"rand-" + "".join(random.choices(string.ascii_lowercase, k=8)) for _ in range(100)}
    with httpx.Client(base_url=server.api) as client:
        for name in names:
            assert client.post("/chat/completions", json={**CHAT, "model": name}).status_code == 404
        assert client.post("/chat/completions", json={**CHAT, "model": "m"}).status_code == 200

    def counted(samples: list[dict[str, str]]) -> bool:
        unknown = sum(float(s["value"]) for s in samples if s["model"] == "unknown")
        return unknown >= len(names) and any(s["model"] == "m" for s in samples)

    requests = _samples(server, "shunter_requests_total", counted)
    models = {s["model"] for s in requests}
    assert models <= {"m", "slow", "unknown"}
    (unknown,) = [s for s in requests if s["model"] == "unknown" and s["status"] == "404"]
    assert float(unknown["value"]) == len(names)
    assert unknown["deployment"] == "-"  # it reached no deployment
    text = httpx.get(f"{server.base_url}/metrics").text
    assert not any(name in text for name in names)


def test_a_deployments_own_429_and_relayed_errors_count_under_it(server: Server) -> None:
    with httpx.Client(base_url=server.api) as client:
        statuses = [client.post("/chat/completions", json={**CHAT, "model": "slow"}).status_code]
        statuses.append(
            client.post("/chat/completions", json={**CHAT, "model": "slow"}).status_code
        )
        # the upstream's own 400 (a fault the fixture reads from the body), relayed
        relayed = client.post("/chat/completions", json={**CHAT, "model": "m", "x_fault": "400"})
    assert statuses == [200, 429]  # rpm 1: the second is the deployment's own refusal
    assert relayed.status_code == 400
    wanted = {("slow", "capped", "429"), ("m", "up", "400")}

    def by(samples: list[dict[str, str]]) -> set[tuple[str, str, str]]:
        return {(s["model"], s["deployment"], s["status"]) for s in samples}

    requests = _samples(server, "shunter_requests_total", lambda found: wanted <= by(found))
    assert wanted <= by(requests)


def test_operations_and_route_decisions_are_labelled(server: Server) -> None:
    with httpx.Client(base_url=server.api) as client:
        assert client.post("/embeddings", json={"model": "m", "input": "hi"}).status_code == 200
        assert client.post("/completions", json={"model": "m", "prompt": "hi"}).status_code == 200
    wanted = {("embeddings", "up"), ("text_completion", "up")}

    def pairs(samples: list[dict[str, str]]) -> set[tuple[str, str]]:
        return {(s["operation"], s["deployment"]) for s in samples}

    durations = _samples(
        server, "gen_ai_server_request_duration_seconds_count", lambda found: wanted <= pairs(found)
    )
    assert wanted <= pairs(durations)
    operations = {s["operation"] for s in _samples(server, "shunter_requests_total")}
    assert {"embeddings", "text_completion"} <= operations
    decisions = _samples(server, "shunter_route_decisions_total")
    assert {(s["model"], s["deployment"], s["step"]) for s in decisions} >= {("m", "up", "only")}
