"""Breaker probes that test what fails: a real `shunter serve` in front of an upstream whose
model list answers 200 while its chat endpoint answers 503, and a healthy second candidate."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from openai import OpenAI

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.fault_upstream import FaultUpstream


def deployment(name: str, upstream: FaultUpstream) -> str:
    return (
        f"  - {{name: {name}, backend: openai, base_url: '{upstream.url}', model: up-{name},"
        " timeouts: {first_token_s: 5, total_s: 20}}\n"
    )


@pytest.fixture(scope="module")
def upstreams() -> Iterator[tuple[FaultUpstream, FaultUpstream]]:
    with FaultUpstream() as a, FaultUpstream() as b:
        yield a, b


@pytest.fixture(scope="module")
def gateway(
    upstreams: tuple[FaultUpstream, FaultUpstream], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    a, b = upstreams
    folder: Path = tmp_path_factory.mktemp("probing")
    config = folder / "shunter.yaml"
    # probes well inside the cooldown, so a failed probe always comes before a trial would
    config.write_text(
        "reliability: {failure_threshold: 1, cooldown_s: 2, max_cooldown_s: 2,"
        " probe_interval_s: 0.5}\n"
        "deployments:\n" + deployment("a", a) + deployment("b", b) + "models:\n"
        "  m: {candidates: [a, b]}\n"
    )
    server = start_server(config, folder / "server.log")
    yield server
    stop_server(server)


def test_while_chat_fails_no_client_request_reaches_the_primary_until_it_recovers(
    gateway: Server, upstreams: tuple[FaultUpstream, FaultUpstream]
) -> None:
    a, _ = upstreams
    a.default_fault, a.models_up = "503", True
    hello = [{"role": "user", "content": "hi"}]
    with OpenAI(base_url=gateway.api, api_key="sk-test", max_retries=0, timeout=30) as client:
        answered = []
        ends = time.monotonic() + 6.0  # three cooldowns
        while time.monotonic() < ends:
            raw = client.chat.completions.with_raw_response.create(model="m", messages=hello)
            answered.append(raw.headers["x-shunter-deployment"])
            time.sleep(0.05)
        assert set(answered) == {"b"}
        assert len(a.requests) == 1  # the request that opened the breaker, and none after
        assert len(a.chat_probes) >= 4 and a.probes  # probed all along, by chat
        a.default_fault = None  # recovered: a probe sees it, the next request goes there
        back_by = time.monotonic() + 5.0
        while time.monotonic() < back_by:
            raw = client.chat.completions.with_raw_response.create(model="m", messages=hello)
            if raw.headers["x-shunter-deployment"] == "a":
                break
            time.sleep(0.1)
        assert raw.headers["x-shunter-deployment"] == "a"
