"""Config validation names the file, the line and the field."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.config import ConfigError, GatewayConfig, default_config, load_config

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


def test_embedded_default_serves_smollm2_under_two_names() -> None:
    config = default_config()
    assert list(config.models) == ["smollm2", "demo"]
    assert config.models["smollm2"].candidates == config.models["demo"].candidates == ["smollm2"]
    assert config.deployment("smollm2").model == "package:smollm2"


def test_wrong_type_names_line_and_field(tmp_path: Path) -> None:
    path = write(tmp_path, VALID.replace("n_ctx: 1024", "n_ctx: lots"))
    assert only_issue(path).startswith(f"{path}:5: deployments.0.n_ctx: ")


def test_unknown_key_names_line_and_field(tmp_path: Path) -> None:
    path = write(tmp_path, VALID.replace("    n_ctx: 1024", "    n_ctx: 1024\n    n_cxt: 9"))
    message = only_issue(path)
    assert message.startswith(f"{path}:6: deployments.0.n_cxt: ")
    assert "Extra inputs are not permitted" in message


@pytest.mark.parametrize(
    ("section", "line", "field", "meant"),
    [
        ("    n_ctxx: 9\n", 6, "deployments.0.n_ctxx", "n_ctx"),  # in the chosen backend's keys
        ("    fallbak: true\n", 9, "models.chat.fallbak", "fallback"),
        ("reliabilty: {retries: 1}\n", 9, "reliabilty", "reliability"),
        ("http: {send_timeout: 3}\n", 9, "http.send_timeout", "send_timeout_s"),
        ("mcp: {servers: {x: {command: [a], toolz: [b]}}}\n", 9, "mcp.servers.x.toolz", "tools"),
    ],
)
def test_a_misspelt_key_gets_the_key_it_was_meant_to_be(
    tmp_path: Path, section: str, line: int, field: str, meant: str
) -> None:
    text = VALID + section if not section.startswith("    ") else _insert(VALID, section, line)
    message = only_issue(write(tmp_path, text))
    assert message.startswith(f"{tmp_path / 'shunter.yaml'}:{line}: {field}: "), message
    assert message.endswith(f"did you mean {meant!r}?"), message


def _insert(text: str, line_text: str, line: int) -> str:
    lines = text.splitlines(keepends=True)
    return "".join([*lines[: line - 1], line_text, *lines[line - 1 :]])


def test_a_key_like_no_other_gets_no_guess(tmp_path: Path) -> None:
    message = only_issue(write(tmp_path, VALID + "zzzzzz: 1\n"))
    assert "did you mean" not in message


def test_unknown_backend_kind(tmp_path: Path) -> None:
    path = write(tmp_path, VALID.replace("backend: llamacpp", "backend: teleport"))
    assert only_issue(path).startswith(f"{path}:3: deployments.0.backend: ")


def test_bad_policy_step_names_the_step(tmp_path: Path) -> None:
    text = VALID.replace(
        "candidates: [local]", "candidates: [local]\n    policy: [healthy, fastets]"
    )
    message = only_issue(write(tmp_path, text))
    assert message.startswith(f"{tmp_path / 'shunter.yaml'}:9: models.chat.policy.1: ")
    assert "fastets" in message
    assert message.endswith("did you mean 'fastest'?")


def test_unknown_candidate(tmp_path: Path) -> None:
    path = write(tmp_path, VALID.replace("candidates: [local]", "candidates: [local, gone]"))
    assert only_issue(path) == (
        f"{path}:8: models.chat.candidates.1: no deployment is named 'gone' (deployments: local)"
    )


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


BROKEN = """\
deployments:
  - name: local
    backend: llamacpp
    model: demo:tiny
    n_ctx: lots
  - name: local
    backend: llamacpp
    model: demo:tiny
  - {name: remote, backend: openai, base_url: http://127.0.0.1:9/v1}
models:
  chat:
    candidates: [local, lcoal]
    policy: [healthy, fastets, {slo: {ttft_ms: soon}}, cheapest]
  other:
    candidates:
      - remote
      - gone
cors: {allow_origins: ["https://app.example.com/"]}
"""


def test_every_problem_comes_out_at_its_line_in_one_pass(tmp_path: Path) -> None:
    path = write(tmp_path, BROKEN)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    lines = [str(issue).removeprefix(f"{path}:") for issue in info.value.issues]
    assert lines == [
        "5: deployments.0.n_ctx: Input should be a valid integer, unable to parse string as an "
        "integer",
        "6: deployments.1.name: 'local' is already the name of deployments.0",
        "9: deployments.2.model: Field required",
        "12: models.chat.candidates.1: no deployment is named 'lcoal' (deployments: local, "
        "remote); did you mean 'local'?",
        "13: models.chat.policy.1: step 1 (fastets): unknown primitive 'fastets' (known: "
        "affinity, cached_prefix, capable, cheapest, fastest, first, fits_memory, healthy, "
        "largest, least_loaded, size, slo, smallest, weighted, within_budget, hedge); "
        "did you mean 'fastest'?",
        "13: models.chat.policy.2: step 2 (slo): ttft_ms: Input should be a valid number, "
        "unable to parse string as a number",
        "17: models.other.candidates.1: no deployment is named 'gone' (deployments: local, remote)",
        "18: cors.allow_origins: 'https://app.example.com/' is not an origin: write "
        "scheme://host[:port] with no path, e.g. https://app.example.com, or * for any page",
    ]


def test_a_policy_of_only_a_hedge_has_no_steps(tmp_path: Path) -> None:
    text = VALID.replace(
        "candidates: [local]", "candidates: [local]\n    policy: [{hedge: {after_ms: 300}}]"
    )
    path = write(tmp_path, text)
    assert only_issue(path) == f"{path}:9: models.chat.policy: policy has no steps"


def test_references_are_still_checked_outside_the_loader() -> None:
    data = {
        "deployments": [{"name": "a", "backend": "llamacpp", "model": "demo:tiny"}],
        "models": {"m": {"candidates": ["b"]}},
    }
    with pytest.raises(ValueError, match="unknown deployments: b"):
        GatewayConfig.model_validate(data)


def test_cors_is_off_by_default_and_lists_origins(tmp_path: Path) -> None:
    assert not load_config(write(tmp_path, VALID)).cors.enabled
    origins = "cors: {allow_origins: [https://app.example.com, '*', http://localhost:3000]}\n"
    cors = load_config(write(tmp_path, VALID + origins)).cors
    assert cors.enabled
    assert cors.listed_origins == {"https://app.example.com", "http://localhost:3000"}
