"""A model whose config names no policy gets the default its candidates call for."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import ConfigError, load_config

CONFIG = """\
deployments:
  - {name: w1, backend: openai, base_url: 'http://10.0.0.1:8080/v1', model: qwen,
     worker_stats: true}
  - {name: w2, backend: openai, base_url: 'http://10.0.0.2:8080/v1', model: qwen,
     worker_stats: true}
  - {name: s1, backend: openai, base_url: 'http://10.0.0.3:8080/v1', model: qwen}
  - {name: s2, backend: openai, base_url: 'http://10.0.0.4:8080/v1', model: qwen}
  - {name: local, backend: llamacpp, model: demo:tiny}
  - {name: local2, backend: llamacpp, model: demo:tiny}
  - {name: api, backend: openai, model: gpt-4o-mini}
models:
  workers: {candidates: [w1, w2]}
  workers-then-api: {candidates: [w1, w2, api], ttft_ms: 2000}
  engines: {candidates: [local, local2], ttft_ms: 900}
  servers: {candidates: [s1, s2]}
  local-then-api: {candidates: [local, api]}
  written: {candidates: [w1, w2], policy: [healthy, first]}
"""


def test_each_route_without_a_policy_gets_the_default_for_its_candidates(
    tmp_path: Path,
) -> None:
    path = tmp_path / "shunter.yaml"
    path.write_text(CONFIG)
    models = load_config(path).models
    described = {name: route.policy.describe() for name, route in models.items()}
    assert described == {
        "workers": "healthy > capable > fits_memory > cached_prefix(margin_ms=250) "
        "(default cached_prefix: 2 interchangeable openai engines)",
        "workers-then-api": "healthy > capable > fits_memory > slo(ttft_ms=2000.0) > "
        "cached_prefix(margin_ms=250) (default cached_prefix: 2 interchangeable openai "
        "engines, then api)",
        "engines": "healthy > capable > fits_memory > slo(ttft_ms=900.0) > "
        "cached_prefix(margin_ms=250) (default cached_prefix: 2 interchangeable llamacpp "
        "engines)",
        # the gateway cannot see what plain servers hold: placing by prefix has no data
        "servers": "healthy > capable > fits_memory > first "
        "(default first: no cache report from s1, s2)",
        "local-then-api": "healthy > capable > fits_memory > first "
        "(default first: local, api differ in model)",
        "written": "healthy > first",
    }


def test_a_latency_target_beside_a_policy_is_refused_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "shunter.yaml"
    path.write_text(CONFIG.replace("policy: [healthy, first]", "policy: [first], ttft_ms: 5"))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    (issue,) = info.value.issues
    assert (issue.line, issue.field) == (17, "models.written")
    assert issue.message.endswith("with a policy, write {slo: {ttft_ms: ...}} in it")
