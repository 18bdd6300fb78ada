"""``shunter check-config`` and ``shunter serve`` look past the file: model files, key
variables, devices, engines and (check-config, unless ``--offline``) upstreams."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest

from gateway.cli import main
from tests.conftest import free_port
from tests.fixtures.fault_upstream import FaultUpstream


def write_config(folder: Path, model: Path | str, extra: str = "") -> Path:
    path = folder / "shunter.yaml"
    path.write_text(
        "deployments:\n"
        f"  - {{name: local, backend: llamacpp, model: '{model}'}}\n"
        f"{extra}"
        "models:\n  m: {candidates: [local]}\n"
    )
    return path


def check(path: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, str, str]:
    code = main(["check-config", *flags, str(path)])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_model_file_that_is_not_a_gguf_fails_the_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = tmp_path / "weights.gguf"
    fake.write_bytes(b"<html>an error page saved as a model</html>")
    path = write_config(tmp_path, fake)
    code, _, err = check(path, capsys)
    assert code == 2
    assert err == (
        f"error: {path}:2: deployments.0.model: {fake} is not a GGUF file "
        "(it starts with b'<htm', not b'GGUF')\n"
    )


def test_a_cut_off_gguf_and_a_missing_model_fail_the_check(
    tmp_path: Path, tiny_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(tiny_model.read_bytes()[:100_000])
    code, _, err = check(write_config(tmp_path, cut), capsys)
    assert code == 2 and "deployments.0.model" in err
    assert "the file is cut short" in err and "bytes of tensor data are missing" in err
    code, _, err = check(write_config(tmp_path, "never-pulled"), capsys)
    assert code == 2
    assert "model 'never-pulled' is neither in the cache" in err and "shunter pull" in err


def test_a_gguf_file_a_packaged_model_and_a_demo_model_pass(
    tmp_path: Path, tiny_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for model in (tiny_model, "package:smollm2", "demo:tiny"):
        code, out, err = check(write_config(tmp_path, model), capsys)
        assert (code, err) == (0, "")
        assert out.endswith(": ok (1 deployments, 1 models: m)\n")
    code, _, err = check(write_config(tmp_path, "package:nothing"), capsys)
    assert code == 2 and "unknown packaged model 'package:nothing'" in err


def test_an_unset_key_variable_and_a_missing_device_are_reported(
    tmp_path: Path,
    tiny_model: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("SHUNTER_TEST_KEY", raising=False)
    extra = (
        "  - {name: remote, backend: openai, model: m, base_url: http://127.0.0.1:9/v1,\n"
        "     api_key_env: SHUNTER_TEST_KEY}\n"
        f"  - {{name: gpu, backend: llamacpp, model: '{tiny_model}', device: gpu7}}\n"
    )
    path = write_config(tmp_path, tiny_model, extra)
    code, _, err = check(path, capsys, "--offline")
    assert code == 2
    key, device = err.splitlines()
    assert key == (
        f"error: {path}:4: deployments.1.api_key_env: the environment variable "
        "SHUNTER_TEST_KEY is not set (the deployment sends its value as the API key): "
        "export SHUNTER_TEST_KEY=..."
    )
    # the devices found here (cpu, and any GPU) are listed between these two parts
    assert device.startswith(
        f"error: {path}:5: deployments.2.device: no device named 'gpu7' on this machine or "
        "under devices: (devices: cpu"
    )
    assert device.endswith("); declare it under devices: to plan for another machine")
    monkeypatch.setenv("SHUNTER_TEST_KEY", "sk-test")
    declared = "devices:\n  - {name: gpu7, kind: cuda, memory_gb: 24}\n"
    path.write_text(declared + path.read_text())
    assert check(path, capsys, "--offline")[0] == 0


def test_upstreams_must_answer_unless_offline(
    tmp_path: Path, tiny_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    closed = f"http://127.0.0.1:{free_port()}/v1"
    with FaultUpstream() as upstream:
        extra = (
            f"  - {{name: up, backend: openai, model: m, base_url: '{upstream.url}'}}\n"
            f"  - {{name: down, backend: openai, model: m, base_url: '{closed}'}}\n"
        )
        path = write_config(tmp_path, tiny_model, extra)
        code, _, err = check(path, capsys)
    assert code == 2
    assert err.startswith(f"error: {path}:4: deployments.2.base_url: cannot reach {closed}: ")
    assert err.endswith("(--offline skips this check)\n") and err.count("\n") == 1
    assert check(path, capsys, "--offline")[0] == 0


def test_a_vllm_deployment_is_checked_without_vllm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "vllm.yaml"
    path.write_text(
        "deployments:\n"
        "  - {name: big, backend: vllm, model: Qwen/Qwen2.5-0.5B-Instruct,\n"
        "     gpu_memory_utilization: 0.8, max_model_len: 4096}\n"
        "models:\n  m: {candidates: [big]}\n"
    )
    code, out, _ = check(path, capsys)
    assert code == 0 and "ok (1 deployments" in out
    if importlib.util.find_spec("vllm") is None:
        assert f"note: {path}:2: deployments.0.backend: settings checked, but the vllm " in out
    path.write_text(path.read_text().replace("0.8", "1.5"))
    code, _, err = check(path, capsys)
    assert code == 2 and "deployments.0.gpu_memory_utilization" in err


def serve(config: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "gateway.cli", "serve", "--config", str(config)]
    return subprocess.run(
        [*command, "--port", str(free_port()), *flags],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_serve_refuses_to_start_with_one_line_per_problem(tmp_path: Path) -> None:
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"not a model")
    path = tmp_path / "serve.yaml"
    path.write_text(
        "deployments:\n"
        "  - {name: a, backend: llamacpp, model: ./nowhere.gguf}\n"
        f"  - {{name: b, backend: llamacpp, model: '{fake}'}}\n"
        "  - {name: c, backend: anthropic, model: claude, api_key_env: SHUNTER_UNSET_KEY}\n"
        "models:\n  m: {candidates: [a, b, c]}\n"
    )
    done = serve(path)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert [line.split(": ")[2] for line in lines] == [
        "deployments.0.model",
        "deployments.1.model",
        "deployments.2.api_key_env",
    ]
    assert all(line.startswith(f"error: {path}:") for line in lines)


def write_unloadable(path: Path) -> None:
    """A whole GGUF with the keys the planner reads, of an architecture llama.cpp lacks."""
    writer = gguf.GGUFWriter(path, "no-such-arch")
    writer.add_block_count(1)
    writer.add_embedding_length(8)
    writer.add_head_count(1)
    writer.add_context_length(64)
    writer.add_tensor("blk.0.attn_q.weight", np.zeros((8, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_an_engine_that_fails_to_start_is_one_line_without_a_traceback(tmp_path: Path) -> None:
    model = tmp_path / "odd.gguf"
    write_unloadable(model)
    path = write_config(tmp_path, model)
    done = serve(path)
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert "Traceback" not in output
    failed = [line for line in output.splitlines() if "start-up failed" in line]
    assert len(failed) == 1 and "odd.gguf" in failed[0], output
    debug = serve(path, "--log-level", "debug")
    assert debug.returncode != 0 and "Traceback" in debug.stdout + debug.stderr
