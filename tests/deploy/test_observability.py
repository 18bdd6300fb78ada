"""The Grafana dashboard and the autoscaling queries ask for metrics the gateway exports:
names and labels are read from a real :class:`gateway.telemetry.instruments.Telemetry`
exposition."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from backends.base import LiveStats
from gateway.dispatch.health.breakers import CircuitBreaker
from tests.deploy.common import DEPLOY, KUBERNETES, load_yaml

DASHBOARD = DEPLOY / "grafana" / "dashboards" / "shunter.json"
# labels Prometheus adds to every scraped series (compose: job/instance/variant; Kubernetes:
# those the ServiceMonitor attaches)
TARGET_LABELS = {"job", "instance", "variant", "namespace", "service", "pod", "endpoint"}
_METRIC = re.compile(r"\b((?:shunter|gen_ai)_[a-z0-9_]+)\b(?!\s*(?:=~|!~|!=|=))")
_SELECTOR = re.compile(r"\b((?:shunter|gen_ai)_[a-z0-9_]+)\{([^}]*)\}")
_SELECTOR_LABEL = re.compile(r"(\w+)\s*(?:=~|!~|!=|=)")
_BY = re.compile(r"by \(([^)]*)\)\s*\((?:rate|increase)?\(?((?:shunter|gen_ai)_[a-z0-9_]+)")


class _Backend:
    def stats(self) -> LiveStats:
        return LiveStats(
            in_flight=2,
            queue_depth=1,
            slots_busy=1,
            slots_total=2,
            kv_used=3,
            kv_total=4,
            prefill_tokens_per_s=900.0,
            decode_tokens_per_s=40.0,
            prefix_hit_rate=0.5,
            prefix_hit_tokens=64,
        )


def _open_breaker() -> CircuitBreaker:
    """A real breaker, opened by three failures, with tallies to export."""
    breaker = CircuitBreaker()
    for _ in range(3):
        breaker.record_failure()
    breaker.fallbacks["rate_limited"] += 2
    breaker.probes["healthy"] += 1
    return breaker


class _Live(dict[str, Any]):
    """A mapping that is also a callable returning itself: Telemetry.watch has taken both."""

    def __call__(self) -> _Live:
        return self


@pytest.fixture(scope="module")
def exported() -> dict[str, set[str]]:
    """Sample name -> label names, from a Telemetry that has seen one complete request."""
    telemetry_module = pytest.importorskip("gateway.telemetry.instruments")
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from prometheus_client.parser import text_string_to_metric_families

    telemetry = telemetry_module.Telemetry(span_exporter=InMemorySpanExporter())
    telemetry.watch(_Live(d=_Backend()), _Live(d=_open_breaker()))
    facts = {
        "model": "m",
        "deployment": "d",
        "prompt_tokens": 7,
        "completion_tokens": 5,
        "cost_usd": 0.001,
        "ttft_ms": 20.0,
    }
    telemetry.record(facts, 200, 0.5)
    text = telemetry.exposition().decode()
    telemetry.shutdown()
    names: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            names.setdefault(sample.name, set()).update(sample.labels)
    return names


def dashboard_queries() -> list[str]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    queries = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        queries.append(variable["query"]["query"])
    return queries


def scaling_queries() -> list[str]:
    queries = []
    for path in KUBERNETES.rglob("*.yaml"):
        for doc in [d for d in load_yaml_all(path) if d and d.get("kind") == "ScaledObject"]:
            queries += [t["metadata"]["query"] for t in doc["spec"].get("triggers", [])]
    return queries


def load_yaml_all(path: Path) -> list[Any]:
    import yaml

    return list(yaml.safe_load_all(path.read_text(encoding="utf-8")))


def check_query(query: str, exported: dict[str, set[str]]) -> None:
    metrics = set(_METRIC.findall(query))
    assert metrics, query
    for metric in metrics:
        assert metric in exported, f"{metric} is not exported: {query}"
    for metric, selector in _SELECTOR.findall(query):
        for label in _SELECTOR_LABEL.findall(selector):
            assert label in exported[metric] | TARGET_LABELS, f"{metric} has no {label}"
    for labels, metric in _BY.findall(query):
        for label in (x.strip() for x in labels.split(",")):
            assert label in exported[metric] | TARGET_LABELS, f"{metric} has no {label}"


def test_exposition_has_the_documented_names(exported: dict[str, set[str]]) -> None:
    for name in (
        "shunter_requests_total",
        "gen_ai_server_time_to_first_token_seconds_bucket",
        "gen_ai_server_time_per_output_token_seconds_bucket",
        "shunter_queue_depth",
        "shunter_kv_cache_usage_ratio",
        "shunter_cost_usd_total",
    ):
        assert name in exported, name
        assert "deployment" in exported[name]


def test_dashboard_queries_ask_for_exported_metrics(exported: dict[str, set[str]]) -> None:
    for query in dashboard_queries():
        check_query(query, exported)


def test_scaling_queries_ask_for_exported_metrics(exported: dict[str, set[str]]) -> None:
    queries = scaling_queries()
    assert len(queries) == 2  # the component and the GPU overlay's patch
    for query in queries:
        check_query(query, exported)


def test_dashboard_covers_the_operator_questions() -> None:
    """TTFT, TPOT, throughput, errors, cost, KV use, route decisions and engine figures,
    each per deployment."""
    by_deployment = [q for q in dashboard_queries() if re.search(r"by \([^)]*deployment", q)]
    wanted = {
        "TTFT": "gen_ai_server_time_to_first_token_seconds_bucket",
        "TPOT": "gen_ai_server_time_per_output_token_seconds_bucket",
        "throughput": 'gen_ai_client_token_usage_sum{gen_ai_token_type="output"',
        "errors": 'shunter_requests_total{status=~"4..|5.."',
        "cost": "shunter_cost_usd_total",
        "KV use": "shunter_kv_cache_usage_ratio",
        "queue depth": "shunter_queue_depth",
        "route decisions": "shunter_route_decisions_total",
        "fallbacks": "shunter_fallbacks_total",
        "prefill rate": "shunter_prefill_tokens_per_second",
        "decode rate": "shunter_decode_tokens_per_second",
        "prefix hits": "shunter_prefix_cache_hit_ratio",
    }
    for question, needle in wanted.items():
        assert any(needle in q for q in by_deployment), f"no per-deployment {question} panel"


def test_dashboard_is_well_formed() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert dashboard["uid"] and dashboard["templating"]["list"][0]["name"] == "deployment"
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        for target in panel.get("targets", []):
            assert target["expr"].count("(") == target["expr"].count(")"), target["expr"]
            assert 'deployment=~"$deployment"' in target["expr"], target["expr"]


def test_prometheus_config_is_plain() -> None:
    config = load_yaml(DEPLOY / "prometheus" / "prometheus.yml")
    jobs = [job["job_name"] for job in config["scrape_configs"]]
    assert len(jobs) == len(set(jobs))
    assert config["scrape_configs"][0]["metrics_path"] == "/metrics"
