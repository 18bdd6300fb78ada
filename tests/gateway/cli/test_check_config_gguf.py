"""``shunter check-config`` looks inside a llama.cpp model file: it must be a GGUF."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cli.main import main


def write_config(folder: Path, model: Path | str) -> Path:
    path = folder / "shunter.yaml"
    path.write_text(
        "deployments:\n"
        f"  - {{name: local, backend: llamacpp, model: '{model}'}}\n"
        "models:\n  m: {candidates: [local]}\n"
    )
    return path


def test_a_model_file_that_is_not_a_gguf_fails_the_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = tmp_path / "weights.gguf"
    fake.write_bytes(b"<html>an error page saved as a model</html>")
    assert main(["check-config", str(write_config(tmp_path, fake))]) == 2
    error = capsys.readouterr().err
    assert "deployment 'local'" in error and "is not a GGUF file" in error


def test_a_gguf_model_file_and_a_cache_name_pass(
    tmp_path: Path, tiny_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check-config", str(write_config(tmp_path, tiny_model))]) == 0
    assert main(["check-config", str(write_config(tmp_path, "some-cached-model"))]) == 0
    assert capsys.readouterr().out.count(": ok (") == 2
