"""Config validation names the file, the line and the field."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.config import ConfigError, default_config, load_config

VALID = """\
deployments:
  - name: local
    backend: llamacpp
    model: demo:tiny
    n_ctx: 1024
models:
  chat:
    candidates: [local]
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "shunter.yaml"
    path.write_text(text)
    return path


def only_issue(path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert len(info.value.issues) == 1
    return str(info.value.issues[0])


def test_valid_config_loads(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, VALID))
    assert config.models["chat"].candidates == ["local"]
    assert config.models["chat"].policy.describe() == "healthy > capable > fits_memory > first"
    assert config.deployment("local").n_ctx == 1024


def test_embedded_default_is_valid() -> None:
    config = default_config()
    assert list(config.models) == ["demo"]


def test_wrong_type_names_line_and_field(tmp_path: Path) -> None:
    path = write(tmp_path, VALID.replace("n_ctx: 1024", "n_ctx: lots"))
    assert only_issue(path).startswith(f"{path}:5: deployments.0.n_ctx: ")


def test_unknown_key_names_line_and_field(tmp_path: Path) -> None:
    path = write(tmp_path, VALID.replace("    n_ctx: 1024", "    n_ctx: 1024\n    n_cxt: 9"))
    message = only_issue(path)
    assert message.startswith(f"{path}:6: deployments.0.n_cxt: ")
    assert "Extra inputs are not permitted" in message


def test_unknown_backend_kind(tmp_path: Path) -> None:
    path = write(tmp_path, VALID.replace("backend: llamacpp", "backend: teleport"))
    assert only_issue(path).startswith(f"{path}:3: deployments.0.backend: ")


def test_bad_policy_step_names_the_step(tmp_path: Path) -> None:
    text = VALID.replace(
        "candidates: [local]", "candidates: [local]\n    policy: [healthy, fastets]"
    )
    message = only_issue(write(tmp_path, text))
    assert message.startswith(f"{tmp_path / 'shunter.yaml'}:9: models.chat.policy: ")
    assert "fastets" in message


def test_unknown_candidate(tmp_path: Path) -> None:
    path = write(tmp_path, VALID.replace("candidates: [local]", "candidates: [local, gone]"))
    assert "unknown deployments: gone" in only_issue(path)


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, VALID.replace("  chat:\n", "  chat: [\n"))
    message = only_issue(path)
    assert message.startswith(f"{path}:") and "invalid YAML" in message


def test_missing_file(tmp_path: Path) -> None:
    message = only_issue(tmp_path / "absent.yaml")
    assert "absent.yaml" in message and "cannot read file" in message


def test_check_config_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write(tmp_path, VALID)
    assert main(["check-config", str(good)]) == 0
    assert "ok" in capsys.readouterr().out
    bad = write(tmp_path, VALID.replace("n_ctx: 1024", "n_ctx: -5"))
    assert main(["check-config", str(bad)]) == 2
    assert f"{bad}:5: deployments.0.n_ctx" in capsys.readouterr().err


def test_serve_with_bad_config_exits_non_zero(tmp_path: Path) -> None:
    bad = write(tmp_path, VALID.replace("parallel", "x").replace("n_ctx: 1024", "n_ctx: []"))
    result = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--config", str(bad), "--port", "9"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert f"{bad}:5: deployments.0.n_ctx" in result.stderr
