"""Spans follow the GenAI conventions; /metrics is scrapeable Prometheus text."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from litestar.testing import TestClient
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from prometheus_client.parser import text_string_to_metric_families

from gateway.config import parse_config
from gateway.dispatch import Gateway
from gateway.errors import UpstreamError
from gateway.http.app import AppSettings, create_app
from gateway.telemetry.instruments import Telemetry
from tests.gateway.scripted import ScriptedBackend

CONFIG = """
deployments:
  - {name: a, backend: llamacpp, model: x.gguf, price: {input_per_1m: 1, output_per_1m: 2}}
models:
  m: {candidates: [a]}
reliability: {retries: 1, backoff_base_s: 0}
"""
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def client(exporter: InMemorySpanExporter) -> Iterator[TestClient]:  # type: ignore[type-arg]
    config = parse_config(CONFIG, "t.yaml")
    backend = ScriptedBackend("a", [UpstreamError("first try fails")])
    app = create_app(
        AppSettings(config=config), Gateway(config, {"a": backend}), Telemetry(exporter)
    )
    with TestClient(app) as test_client:
        yield test_client


def test_server_and_client_spans_carry_genai_attributes(
    client: TestClient,
    exporter: InMemorySpanExporter,  # type: ignore[type-arg]
) -> None:
    response = client.post("/v1/chat/completions", json=BODY)
    assert response.status_code == 200
    spans = {
        (s.kind, s.attributes["shunter.attempt"] if s.kind == SpanKind.CLIENT else -1): s
        for s in exporter.get_finished_spans()
    }
    server = spans[(SpanKind.SERVER, -1)]
    assert server.name == "chat m"
    assert server.attributes is not None
    assert server.attributes["gen_ai.operation.name"] == "chat"
    assert server.attributes["gen_ai.request.model"] == "m"
    assert server.attributes["shunter.route.deployment"] == "a"
    failed, succeeded = spans[(SpanKind.CLIENT, 0)], spans[(SpanKind.CLIENT, 1)]
    for span in (failed, succeeded):
        assert span.name == "chat x.gguf"
        assert span.attributes is not None
        assert span.attributes["gen_ai.provider.name"] == "llamacpp"
        assert span.parent is not None and span.parent.span_id == server.context.span_id
    assert failed.attributes is not None and failed.attributes["error.type"] == "UpstreamError"
    assert "error.type" not in (succeeded.attributes or {})


def test_metrics_endpoint_is_parseable_and_counts(client: TestClient) -> None:  # type: ignore[type-arg]
    assert client.post("/v1/chat/completions", json=BODY).status_code == 200
    assert client.post("/v1/chat/completions", json={**BODY, "model": "zz"}).status_code == 404
    text = client.get("/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    requests = {
        (s.labels["model"], s.labels["status"]): s.value
        for s in families["shunter_requests"].samples
        if s.name == "shunter_requests_total"
    }
    assert requests[("m", "200")] == 1
    assert requests[("unknown", "404")] == 1  # a name the config does not serve
    queue = families["shunter_queue_depth"].samples
    assert [(s.labels["deployment"], s.value) for s in queue] == [("a", 0.0)]
    assert "gen_ai_server_request_duration_seconds" in families
    assert "shunter_deployment_cooled_down" in families
