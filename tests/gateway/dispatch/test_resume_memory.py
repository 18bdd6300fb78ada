"""What resumed streams leave behind: nothing that only the garbage collector frees.

The server runs the collector rarely (young objects every 10,000 allocations, a full pass
far less often), so whatever a stream leaves in a reference cycle stays until then, and a
worker grows with the streams it served. Here the collector is off while many streams are
cut mid-way and continued elsewhere (in-process app, real upstreams on loopback): what is
still alive afterwards is what plain reference counting could not free."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from litestar import Litestar
from litestar.testing import TestClient

from backends.http import h1
from gateway.apis.responses.translation import ResponsesCall
from gateway.config import parse_config
from gateway.dispatch import Gateway
from gateway.dispatch.midstream.resume import Resume
from gateway.http.app import AppSettings, create_app
from tests.fixtures.collector import alive, collector_off
from tests.fixtures.fault_upstream import CHUNKS, FaultUpstream

STREAMS = 40
TEXT = "".join(f"word{i} " for i in range(CHUNKS))


@pytest.fixture(name="collector_off")
def _collector_off() -> Iterator[None]:
    with collector_off():
        yield


def answer_of(text: str) -> str:
    frames = [f[5:] for f in text.split("\n\n") if f.startswith("data: {")]
    chunks = [json.loads(f) for f in frames]
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


def cutting_app(a: FaultUpstream, b: FaultUpstream) -> Litestar:
    """Model ``m``: ``a``, which cuts every stream after four chunks, then ``b``."""
    a.default_fault = "cut:4"
    config = parse_config(
        "deployments:\n"
        f"  - {{name: a, backend: openai, base_url: '{a.url}', model: up-a}}\n"
        f"  - {{name: b, backend: openai, base_url: '{b.url}', model: up-b}}\n"
        "models:\n  m: {candidates: [a, b], policy: [first]}\n"
        "reliability: {failure_threshold: 1000}\n",  # a stays in the route
        "t.yaml",
    )
    return create_app(AppSettings(config=config), Gateway.from_config(config))


@pytest.mark.usefixtures("collector_off")
def test_resumed_streams_leave_no_connections_behind() -> None:
    with FaultUpstream() as a, FaultUpstream() as b:
        app = cutting_app(a, b)
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        with TestClient(app) as client:
            before = alive(h1._Connection)
            for _ in range(STREAMS):
                response = client.post("/v1/chat/completions", json=body)
                assert response.status_code == 200
                assert ": resumed on b after a: cut" in response.text
                assert answer_of(response.text) == TEXT
            # b's idle connections stay pooled; each of a's was cut and must be gone
            assert alive(h1._Connection) - before <= 2
            assert alive(Resume) == 0
        assert len(a.requests) == len(b.requests) == STREAMS


@pytest.mark.usefixtures("collector_off")
def test_resumed_responses_streams_leave_no_calls_behind() -> None:
    with FaultUpstream() as a, FaultUpstream() as b:
        app = cutting_app(a, b)
        body = {"model": "m", "input": "hi", "stream": True}
        with TestClient(app) as client:
            for _ in range(STREAMS):
                response = client.post("/v1/responses", json=body)
                assert response.status_code == 200
                assert "response.completed" in response.text
            assert alive(ResponsesCall) == 0
        assert len(a.requests) == len(b.requests) == STREAMS
