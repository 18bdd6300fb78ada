"""A 429 asking for a short wait, as a client sees it: a real `shunter serve` in front of
loopback upstreams, a rate-limited first candidate, and a second that is free now and
either serves the same model at the same price or another model."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from openai import OpenAI

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.fault_upstream import FaultUpstream

HELLO = [{"role": "user", "content": "hi"}]


@dataclass(frozen=True)
class Setup:
    gateway: Server
    a: FaultUpstream
    twin: FaultUpstream
    other: FaultUpstream


def deployment(name: str, upstream: FaultUpstream, model: str) -> str:
    return (
        f"  - {{name: {name}, backend: openai, base_url: '{upstream.url}', model: {model},"
        " price: {input_per_1m: 1, output_per_1m: 2}}\n"
    )


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    folder = tmp_path_factory.mktemp("retry-after")
    with FaultUpstream() as a, FaultUpstream() as twin, FaultUpstream() as other:
        config = folder / "shunter.yaml"
        config.write_text(
            "deployments:\n"
            + deployment("a", a, "small")
            + deployment("twin", twin, "small")  # the same model at the same price
            + deployment("other", other, "large")
            + "models:\n"
            "  same: {candidates: [a, twin]}\n"
            "  different: {candidates: [a, other]}\n"
            "  impatient: {candidates: [a, other], retry_after_wait_s: 0}\n"
        )
        server = start_server(config, folder / "server.log")
        try:
            yield Setup(server, a, twin, other)
        finally:
            stop_server(server)


@pytest.mark.parametrize(
    ("model", "retry_after", "answered", "waited"),
    [
        ("different", "1", "a", True),  # a short wait beats moving to another model
        ("different", "3", "other", False),  # longer than retry_after_wait_s (2 s)
        ("same", "1", "twin", False),  # the same model, no dearer: moving costs nothing
        ("impatient", "1", "other", False),  # waiting turned off
    ],
)
def test_a_short_retry_after_is_waited_out_only_when_moving_would_change_the_model(
    setup: Setup, model: str, retry_after: str, answered: str, waited: bool
) -> None:
    setup.a.queue.append(f"429:{retry_after}")
    seen = len(setup.a.requests)
    with OpenAI(base_url=setup.gateway.api, api_key="sk-test", max_retries=0) as client:
        raw = client.chat.completions.with_raw_response.create(model=model, messages=HELLO)
    assert raw.headers["x-shunter-deployment"] == answered
    tries = setup.a.requests[seen:]
    assert len(tries) == (2 if waited else 1)
    if waited:  # the second try came after the second the upstream asked for
        assert tries[1].at - tries[0].at >= 0.95
