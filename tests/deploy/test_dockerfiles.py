"""Dockerfile, Dockerfile.gpu and deploy/otel/Dockerfile, checked without a Docker engine:
instructions parse, every build-context file exists and survives .dockerignore, and the images
run the `shunter` console script as a non-root user with a healthcheck."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.common import DEPLOY, ROOT, load_yaml, parse_shunter
from tests.deploy.dockerfile import (
    Dockerfile,
    DockerIgnore,
    copy_sources,
    healthcheck_command,
    parse,
)

GATEWAY_IMAGES = {"Dockerfile": ROOT, "Dockerfile.gpu": ROOT}
LOCKS = {"Dockerfile": "requirements.lock", "Dockerfile.gpu": "requirements-gpu.lock"}
ALL_IMAGES = {**GATEWAY_IMAGES, "deploy/otel/Dockerfile": DEPLOY / "otel"}
_URL_PORT = re.compile(r"https?://127\.0\.0\.1:(\d+)(/\S*?)['\"]")


def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def dockerignore(context: Path) -> DockerIgnore:
    path = context / ".dockerignore"
    return DockerIgnore(path.read_text(encoding="utf-8") if path.exists() else "")


def healthcheck_url(dockerfile: Dockerfile) -> tuple[int, str]:
    instruction = dockerfile.final.last("HEALTHCHECK")
    assert instruction is not None, f"{dockerfile.path.name}: no HEALTHCHECK"
    match = _URL_PORT.search(" ".join(healthcheck_command(instruction)))
    assert match, instruction.value
    return int(match.group(1)), match.group(2)


@pytest.mark.parametrize("name", sorted(ALL_IMAGES))
def test_parses_and_copies_only_existing_context_files(name: str) -> None:
    dockerfile = parse(ROOT / name)
    assert dockerfile.directives.get("syntax", "").startswith("docker/dockerfile:")
    context = ALL_IMAGES[name]
    ignore = dockerignore(context)
    stage_names = {s.name for s in dockerfile.stages if s.name}
    for stage in dockerfile.stages:
        assert stage.base and "$" not in stage.base, f"unresolved base {stage.base!r}"
        for instruction in stage.all("COPY") + stage.all("ADD"):
            for source in copy_sources(instruction):
                assert (context / source).exists(), f"{name}:{instruction.line}: {source}"
                assert not ignore.excluded(source), f"{name}: .dockerignore drops {source}"
            if "--from=" in instruction.value:
                origin = instruction.value.split("--from=", 1)[1].split()[0]
                assert origin in stage_names, f"{name}:{instruction.line}: stage {origin}"
    assert dockerfile.final.last("HEALTHCHECK") is not None


@pytest.mark.parametrize("name", sorted(GATEWAY_IMAGES))
def test_gateway_image_runs_shunter_as_non_root(name: str) -> None:
    dockerfile = parse(ROOT / name)
    final = dockerfile.final
    user = final.last("USER")
    assert user is not None and user.value.split(":")[0] not in ("root", "0")
    entrypoint, cmd = final.last("ENTRYPOINT"), final.last("CMD")
    assert entrypoint is not None and cmd is not None
    assert entrypoint.exec_form == ["shunter"]
    assert pyproject()["project"]["scripts"]["shunter"] == "gateway.cli:main"
    assert cmd.exec_form is not None and cmd.exec_form[0] == "serve"
    args = parse_shunter(cmd.exec_form)
    assert args.host == "0.0.0.0"
    port = args.port
    exposed = {int(p.split("/")[0]) for e in final.all("EXPOSE") for p in e.value.split()}
    assert exposed == {port}
    assert healthcheck_url(dockerfile) == (port, "/health/readiness")
    assert "SHUNTER_MODEL_DIR=/models" in " ".join(e.value for e in final.all("ENV"))


@pytest.mark.parametrize("name", sorted(GATEWAY_IMAGES))
def test_gateway_image_installs_every_package(name: str) -> None:
    dockerfile = parse(ROOT / name)
    copied = {
        source.rstrip("/")
        for stage in dockerfile.stages
        for instruction in stage.all("COPY")
        for source in copy_sources(instruction)
    }
    project = pyproject()
    packages = {p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert packages <= copied, f"not copied: {packages - copied}"
    assert {"pyproject.toml", project["project"]["readme"]} <= copied
    runs = " ".join(r.value for stage in dockerfile.stages for r in stage.all("RUN"))
    envs = " ".join(e.value for stage in dockerfile.stages for e in stage.all("ENV"))
    # portable llama.cpp: no -march=native, no multimodal library
    assert "-DGGML_NATIVE=OFF" in envs + runs and "-DLLAVA_BUILD=OFF" in envs + runs
    # dependencies come from the image's lock (written from pyproject.toml, hashes checked),
    # never from a second hand-kept list; Shunter itself is added without dependencies
    lock = LOCKS[name]
    assert lock in copied
    assert f"pip install --require-hashes -r {lock}" in runs
    for args in re.findall(r"pip install ([^&]*)", runs):
        assert "--require-hashes" in args or "--no-deps" in args, f"unpinned: pip install {args}"


def test_cpu_image_is_python_slim() -> None:
    dockerfile = parse(ROOT / "Dockerfile")
    assert all(s.base.startswith("python:3.11-slim") for s in dockerfile.stages)


def test_gpu_image_is_cuda_with_the_vllm_extra() -> None:
    dockerfile = parse(ROOT / "Dockerfile.gpu")
    base = dockerfile.stages[0].base
    assert re.match(r"nvidia/cuda:[\d.]+-(cudnn-)?runtime-", base) or base.startswith(
        "vllm/vllm-openai:"
    )
    runs = " ".join(r.value for stage in dockerfile.stages for r in stage.all("RUN"))
    assert "pip install --require-hashes -r requirements-gpu.lock" in runs
    assert "pip show vllm" in runs, "the build fails when the lock installs no vLLM"
    env = " ".join(e.value for e in dockerfile.final.all("ENV"))
    assert "HF_HOME=/models/huggingface" in env


def test_pyproject_has_the_vllm_extra_the_gpu_image_installs() -> None:
    extras = pyproject()["project"].get("optional-dependencies", {})
    if "vllm" not in extras:
        pytest.skip("pyproject.toml has no vllm extra yet: Dockerfile.gpu would fail to build")
    assert any(re.match(r"vllm\b", requirement) for requirement in extras["vllm"])


def test_collector_image_ships_its_healthcheck_tool() -> None:
    dockerfile = parse(DEPLOY / "otel" / "Dockerfile")
    assert dockerfile.final.base.startswith("otel/opentelemetry-collector-contrib:")
    assert dockerfile.stages[0].base.endswith("-musl"), "a static busybox for a scratch image"
    copied = [c.value for c in dockerfile.final.all("COPY")]
    assert "--from=busybox /bin/busybox /busybox" in copied
    instruction = dockerfile.final.last("HEALTHCHECK")
    assert instruction is not None
    compose = load_yaml(ROOT / "docker-compose.yml")
    compose_test = compose["services"]["otel-collector"]["healthcheck"]["test"]
    assert compose_test == ["CMD", *healthcheck_command(instruction)]


def test_dockerignore_keeps_the_context_small() -> None:
    ignore = dockerignore(ROOT)
    for path in (".git", ".venv/bin/python", "tests/conftest.py", "deploy/config", "x.gguf"):
        assert ignore.excluded(path), path
    for path in ("pyproject.toml", "README.md", "gateway/cli.py", "backends/base.py"):
        assert not ignore.excluded(path), path
    assert ignore.excluded("gateway/__pycache__/cli.cpython-311.pyc")


def test_compose_builds_these_dockerfiles() -> None:
    compose = load_yaml(ROOT / "docker-compose.yml")
    built = {
        str((ROOT / s["build"]["context"] / s["build"].get("dockerfile", "Dockerfile")).resolve())
        for s in compose["services"].values()
        if "build" in s
    }
    assert built == {str((ROOT / name).resolve()) for name in ALL_IMAGES}
