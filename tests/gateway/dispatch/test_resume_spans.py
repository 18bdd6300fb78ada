"""A resumed stream's trace: the first attempt's client span and the continuation's, which
says what it continues (in-process app, real upstreams on loopback, spans in memory)."""

from __future__ import annotations

import json

from litestar.testing import TestClient
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from gateway.config import parse_config
from gateway.dispatch import Gateway
from gateway.http.app import AppSettings, create_app
from gateway.telemetry.instruments import Telemetry
from tests.fixtures.fault_upstream import CHUNKS, FaultUpstream


def test_both_attempts_of_a_resumed_stream_have_spans() -> None:
    exporter = InMemorySpanExporter()
    with FaultUpstream() as a, FaultUpstream() as b:
        config = parse_config(
            "deployments:\n"
            f"  - {{name: a, backend: openai, base_url: '{a.url}', model: up-a}}\n"
            f"  - {{name: b, backend: openai, base_url: '{b.url}', model: up-b}}\n"
            "models:\n  m: {candidates: [a, b]}\n",
            "t.yaml",
        )
        app = create_app(
            AppSettings(config=config), Gateway.from_config(config), Telemetry(exporter)
        )
        a.queue.append("cut:4")
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        with TestClient(app) as client:
            response = client.post("/v1/chat/completions", json=body)
        assert response.status_code == 200
        frames = response.text.split("\n\n")
        chunks = [json.loads(f[5:]) for f in frames if f.startswith("data: {")]
        text = "".join(
            c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]
        )
        assert text == "".join(f"word{i} " for i in range(CHUNKS))
    clients = [s for s in exporter.get_finished_spans() if s.kind == SpanKind.CLIENT]
    by = {(s.attributes or {})["shunter.deployment"]: s for s in clients}
    assert set(by) == {"a", "b"}
    first, resumed = by["a"].attributes or {}, by["b"].attributes or {}
    assert first["gen_ai.operation.name"] == resumed["gen_ai.operation.name"] == "chat"
    assert "shunter.resume.after" not in first
    assert resumed["shunter.resume.after"] == "a"
    assert resumed["shunter.resume.cause"] == "cut"
    assert resumed["shunter.resume.after_tokens"] == 4
    (server,) = [s for s in exporter.get_finished_spans() if s.kind == SpanKind.SERVER]
    assert all(s.parent is not None and s.parent.span_id == server.context.span_id for s in clients)
