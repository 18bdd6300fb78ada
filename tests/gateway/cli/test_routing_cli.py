"""``shunter plan`` and ``shunter route`` on a config with a generated GGUF."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from openai import OpenAI

from backends.llamacpp.settings import LlamaCppSettings
from gateway.cli import main
from gateway.config import DeviceSpec, load_config
from gateway.planner import Device
from gateway.residency.placement import plan_deployments
from tests.conftest import start_server, stop_server


def config_file(tmp_path: Path, tiny_model: Path) -> Path:
    path = tmp_path / "shunter.yaml"
    path.write_text(
        f"""
devices:
  - {{name: small-gpu, kind: cuda, memory_gb: 0.0001}}
deployments:
  - {{name: local, backend: llamacpp, model: {tiny_model}, n_ctx: 1024,
     price: {{input_per_1m: 0.5, output_per_1m: 0.5}}}}
  - {{name: cramped, backend: llamacpp, model: {tiny_model}, n_ctx: 8192, parallel: 8,
     device: small-gpu, gpu_layers: -1, price: {{input_per_1m: 0.1, output_per_1m: 0.1}}}}
models:
  chat:
    candidates: [cramped, local]
    policy: [healthy, capable, fits_memory, cheapest]
"""
    )
    return path


def test_placement_uses_declared_device(tmp_path: Path, tiny_model: Path) -> None:
    config = load_config(config_file(tmp_path, tiny_model))
    cpu = Device("cpu", "cpu", 16 << 30)
    placements = {
        p.deployment: p for p in plan_deployments(config.deployments, config.devices, lambda: [cpu])
    }
    local, cramped = placements["local"].plan, placements["cramped"].plan
    assert local is not None and local.device == "cpu" and local.fit == "fits"
    assert cramped is not None and cramped.device == "small-gpu"
    assert cramped.fit in ("partial_offload", "does_not_fit", "kv_spills")
    assert DeviceSpec(name="x", kind="cpu", memory_gb=1).memory_gb == 1


def test_route_explains_each_step(
    tmp_path: Path, tiny_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = config_file(tmp_path, tiny_model)
    assert main(["route", "--config", str(path), "--model", "chat", "--prompt-tokens", "50"]) == 0
    out = capsys.readouterr().out
    assert "policy healthy > capable > fits_memory > cheapest" in out
    assert "fits_memory" in out and "cramped" in out
    # the cheaper deployment does not fit its device, so the route picks the other one
    assert out.strip().splitlines()[-1].startswith("route: local")


def test_route_says_which_default_applied_and_why(
    tmp_path: Path, tiny_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "defaults.yaml"
    path.write_text(
        "deployments:\n"
        f"  - {{name: e1, backend: llamacpp, model: '{tiny_model}'}}\n"
        f"  - {{name: e2, backend: llamacpp, model: '{tiny_model}'}}\n"
        "  - {name: api, backend: openai, model: gpt-4o-mini}\n"
        "models:\n  pair: {candidates: [e1, e2]}\n  ordered: {candidates: [e1, api]}\n"
    )
    assert main(["route", "--config", str(path), "--model", "pair"]) == 0
    out = capsys.readouterr().out
    assert "policy healthy > capable > fits_memory > cached_prefix(margin_ms=250) (default " in out
    last = out.strip().splitlines()[-1]
    assert last.endswith("; default cached_prefix: 2 interchangeable llamacpp engines"), last
    assert main(["route", "--config", str(path), "--model", "ordered"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == "route: e1 by first config order; default first: e1, api differ in model"


def test_route_with_too_long_request_has_no_candidate(
    tmp_path: Path, tiny_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = config_file(tmp_path, tiny_model)
    code = main(["route", "--config", str(path), "--model", "chat", "--prompt-tokens", "9000"])
    assert code == 1
    assert "no candidate" in capsys.readouterr().out


def test_route_names_a_content_part_no_candidate_reads(
    tmp_path: Path, tiny_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = config_file(tmp_path, tiny_model)
    code = main(["route", "--config", str(path), "--model", "chat", "--part", "input_audio"])
    assert code == 1
    out = capsys.readouterr().out
    assert "no input_audio parts" in out and "no candidate" in out


def test_plan_prints_a_row_per_deployment(
    tmp_path: Path, tiny_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", "--config", str(config_file(tmp_path, tiny_model))]) == 0
    out = capsys.readouterr().out
    assert "Memory plan" in out and "small-gpu" in out
    cells = [line.split("│")[1].strip() for line in out.splitlines() if line.startswith("│")]
    assert [cell for cell in cells if cell] == ["local", "cramped"]  # rows may wrap


def test_plan_fails_when_a_model_cannot_be_read(
    tmp_path: Path, tiny_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(
        "deployments:\n"
        f"  - {{name: fine, backend: llamacpp, model: '{tiny_model}'}}\n"
        "  - {name: gone, backend: llamacpp, model: ./missing.gguf}\n"
        "  - {name: api, backend: openai, model: gpt-4o-mini}\n"
        "models:\n  m: {candidates: [fine, gone, api]}\n"
    )
    assert main(["plan", "--config", str(path)]) == 1
    out, err = capsys.readouterr()
    assert "fine" in out and "api: openai: no local memory to plan" in out
    assert err.startswith("error: deployment 'gone': llamacpp: cannot read model: ")
    assert err.count("\n") == 1


def test_route_says_a_local_model_cannot_be_read(
    tmp_path: Path, tiny_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "route.yaml"
    path.write_text(
        "deployments:\n"
        "  - {name: gone, backend: llamacpp, model: ./missing.gguf}\n"
        f"  - {{name: fine, backend: llamacpp, model: '{tiny_model}'}}\n"
        "models:\n  m: {candidates: [gone, fine]}\n"
    )
    assert main(["route", "--config", str(path), "--model", "m"]) == 1
    out, err = capsys.readouterr()
    assert "route: gone" in out  # the decision is still explained
    assert err.startswith("error: deployment 'gone': llamacpp: cannot read model: ")
    assert "./missing.gguf" in err and err.count("\n") == 1


def test_the_default_plan_is_smollm2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan"]) == 0
    out = capsys.readouterr().out
    (row,) = [line for line in out.splitlines() if line.startswith("│")]
    cells = [cell.strip() for cell in row.split("│")[1:-1]]
    assert cells[:4] == ["smollm2", "Smollm2 135M 8k Lc100K Mix1 Ep2", "cpu", "2048 x 2"]
    assert cells[5] == "0.09" and cells[-2] == "fits"  # 98 MB of weights


def test_route_prices_an_hourly_deployment_from_measured_throughput(
    tmp_path: Path, tiny_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "hourly.yaml"
    path.write_text(
        "deployments:\n"
        f"  - {{name: rented, backend: llamacpp, model: '{tiny_model}', threads: 1,\n"
        "     price: {usd_per_hour: 0.40}}\n"
        "models:\n  m: {candidates: [rented], policy: [cheapest]}\n"
    )
    route = ["route", "--config", str(path), "--model", "m", "--max-tokens", "100"]
    assert main(route) == 0
    out = capsys.readouterr().out
    assert "cost unknown" in out and "$0.000000" not in out
    assert "price rented: $0.4/hour; its throughput is measured only by a running gateway" in out
    server = start_server(path, tmp_path / "hourly.log")
    try:
        with OpenAI(base_url=server.api, api_key="unused", max_retries=0) as client:
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=16
            )
        assert main([*route, "--live", server.base_url]) == 0
    finally:
        stop_server(server)
    out = capsys.readouterr().out
    price = re.search(
        r"price rented: \$0.4/hour at ([\d,]+) tokens/s decoded \(measured\) = \$([\d.]+)", out
    )
    assert price is not None, out
    rate, cost = float(price.group(1).replace(",", "")), float(price.group(2))
    assert rate > 0 and cost > 0
    assert f"cheapest       score    ${cost:.6f}" in out


def test_an_embedding_deployment_is_planned_for_one_sequence(tiny_model: Path) -> None:
    common = {"backend": "llamacpp", "model": str(tiny_model), "n_ctx": 1024, "parallel": 8}
    generate = LlamaCppSettings(name="gen", **common)
    embed = LlamaCppSettings(name="emb", task="embed", kv_cache_type="q8_0", **common)
    cpu = Device("cpu", "cpu", 16 << 30)
    gen_plan, emb_plan = (p.plan for p in plan_deployments([generate, embed], [], lambda: [cpu]))
    assert gen_plan is not None and emb_plan is not None
    assert (gen_plan.slots, emb_plan.slots) == (8, 1)
    assert emb_plan.kv_dtype == "f16"  # what the embedding context really allocates
    assert emb_plan.weights_bytes == gen_plan.weights_bytes
    assert emb_plan.kv_bytes * 8 == gen_plan.kv_bytes
