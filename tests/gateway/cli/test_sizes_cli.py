"""Model sizes from config and from the GGUF, as `check-config`, `plan` and `route` show
them, and `check-config` refusing a cascade that starts where nothing can be judged."""

from __future__ import annotations

from pathlib import Path

import pytest

from backends.llamacpp.settings import LlamaCppSettings
from gateway.cli import main
from gateway.config import load_config
from gateway.planner import shape_from_gguf


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "shunter.yaml"
    path.write_text(text)
    return path


def test_a_local_deployment_reads_its_size_from_the_gguf(tiny_model: Path) -> None:
    shape = shape_from_gguf(tiny_model)
    assert shape.parameters is not None and shape.parameters > 0
    assert shape.active_parameters is None  # a dense model
    settings = LlamaCppSettings(name="local", backend="llamacpp", model=str(tiny_model))
    size = settings.model_size()
    assert size is not None and size.source == "gguf"
    assert size.params_b == pytest.approx(shape.parameters / 1e9)
    declared = settings.model_copy(update={"params_b": 3.0})
    assert declared.model_size() is not None and declared.model_size().source == "declared"  # type: ignore[union-attr]


def routing_config(tmp_path: Path, tiny_model: Path, policy: str) -> Path:
    return write(
        tmp_path,
        f"""
deployments:
  - {{name: api, backend: openai, base_url: 'http://127.0.0.1:9/v1', model: m, params_b: 70}}
  - {{name: mystery, backend: openai, base_url: 'http://127.0.0.1:9/v1', model: m}}
  - {{name: local, backend: llamacpp, model: {tiny_model}, n_ctx: 512}}
models:
  chat:
    candidates: [api, mystery, local]
    policy: {policy}
""",
    )


def test_route_orders_by_declared_and_gguf_sizes_and_names_the_unknown(
    tmp_path: Path, tiny_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = routing_config(tmp_path, tiny_model, "[healthy, capable, smallest]")
    assert main(["route", "--config", str(config), "--model", "chat"]) == 0
    out = capsys.readouterr().out
    assert "route: local" in out
    assert "note: smallest: size unknown for mystery, ranked last" in out
    sizes = next(line for line in out.splitlines() if line.startswith("sizes: "))
    assert "api 70B (declared)" in sizes and "mystery size unknown" in sizes
    assert "local " in sizes and "(gguf)" in sizes
    config = routing_config(tmp_path, tiny_model, "[healthy, largest]")
    assert main(["route", "--config", str(config), "--model", "chat"]) == 0
    assert "route: api" in capsys.readouterr().out


def test_the_size_filter_drops_by_gguf_size(
    tmp_path: Path, tiny_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = routing_config(tmp_path, tiny_model, "[{size: {min_b: 1}}, smallest]")
    assert main(["route", "--config", str(config), "--model", "chat"]) == 0
    out = capsys.readouterr().out
    assert "route: api" in out
    assert "local" in out and "< 1B" in out


def test_plan_shows_every_size(
    tmp_path: Path, tiny_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = routing_config(tmp_path, tiny_model, "[smallest]")
    main(["plan", "--config", str(config)])
    out = capsys.readouterr().out
    assert "size api: 70B (declared)" in out
    assert "size mystery: unknown (declare params_b)" in out
    assert "size local: " in out and "(gguf)" in out


def test_check_config_notes_a_declared_size_the_file_contradicts(
    tmp_path: Path, tiny_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(
        tmp_path,
        f"""
deployments:
  - name: local
    backend: llamacpp
    model: {tiny_model}
    params_b: 7
models:
  chat: {{candidates: [local]}}
""",
    )
    assert main(["check-config", "--offline", str(config)]) == 0
    out = capsys.readouterr().out
    assert (
        f"note: {config}:6: deployments.0.params_b: declared 7B (declared), but the model " in out
    )
    assert "routing uses the declared size" in out


CASCADE = """
deployments:
  - {{name: claude, backend: anthropic, model: claude-sonnet, params_b: {claude_b}}}
  - {{name: local, backend: openai, base_url: 'http://127.0.0.1:9/v1', model: m, params_b: 8}}
models:
  chat:
    candidates: [claude, local]
    policy: [healthy, smallest]
    cascade: {{min_confidence: 0.6}}
"""


def test_check_config_refuses_a_cascade_that_starts_with_anthropic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    config = write(tmp_path, CASCADE.format(claude_b=1))
    assert main(["check-config", "--offline", str(config)]) == 2
    err = capsys.readouterr().err
    assert f"{config}:9: models.chat.cascade: the cascade starts at 'claude', which cannot " in err
    # ranked last (larger), Anthropic is a fine last step
    config = write(tmp_path, CASCADE.format(claude_b=400))
    assert main(["check-config", "--offline", str(config)]) == 0
    assert load_config(config).models["chat"].cascade is not None


def test_check_config_refuses_an_upstream_configured_without_logprobs_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(
        tmp_path,
        """
deployments:
  - {name: a, backend: openai, base_url: 'http://127.0.0.1:9/v1', model: m, logprobs: false}
  - {name: b, backend: openai, base_url: 'http://127.0.0.1:9/v1', model: m}
models:
  chat:
    candidates: [a, b]
    cascade: {min_confidence: 0.5}
""",
    )
    assert main(["check-config", "--offline", str(config)]) == 2
    assert "the cascade starts at 'a'" in capsys.readouterr().err


def test_route_shows_the_cascade_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    config = write(tmp_path, CASCADE.format(claude_b=400))
    assert main(["route", "--config", str(config), "--model", "chat"]) == 0
    out = capsys.readouterr().out
    assert "cascade: serve when mean >= 0.60, else move up (at most 1)" in out
    assert "1. local: judged; below 0.60 -> next" in out
    assert "2. claude: serves what reaches it (the last step)" in out
