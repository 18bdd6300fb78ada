"""The layer contracts in pyproject.toml hold, and they would catch an upward import."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [str(LINT_IMPORTS), "--no-cache"]
    return subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the packages and the contracts, free to be broken."""
    for name in ("gateway", "backends", "policies"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "pyproject.toml", tmp_path)
    return tmp_path


def test_the_tree_keeps_its_layers(tree: Path) -> None:
    result = lint_imports(tree)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("module", "upward"),
    [
        ("gateway/errors.py", "gateway.http.app"),  # the floor reaching for the app
        ("backends/llamacpp/engine.py", "gateway.residency.placement"),  # the old circle
        ("policies/facts.py", "backends.base"),  # pure logic reaching for a backend
        ("backends/openai/backend.py", "backends.anthropic.wire"),  # one backend in another
        ("gateway/http/serving.py", "gateway.dispatch.midstream.resume"),  # behind dispatch's face
        ("gateway/http/serving.py", "gateway.apis.openai.chat"),  # one API, not the registry
        ("gateway/apis/contract.py", "gateway.apis.registry"),  # the contract reaching up
        ("gateway/apis/mcp/endpoint.py", "gateway.apis.responses.stored"),  # one API in another
        ("gateway/dispatch/midstream/resume.py", "gateway.dispatch.routing.dispatcher"),
    ],
)
def test_an_upward_import_breaks_the_contract(tree: Path, module: str, upward: str) -> None:
    path = tree / module
    # hidden inside a function, where a circle is usually dodged
    path.write_text(path.read_text() + f"\n\ndef _sneak() -> None:\n    import {upward}  # noqa\n")
    result = lint_imports(tree)
    assert result.returncode != 0
    assert upward in result.stdout


@pytest.mark.parametrize(
    ("module", "imported"),
    [
        ("gateway/http/asgi.py", "gateway.http.serving"),  # serving writes its bodies there
        ("policies/facts.py", "policies.policy"),
        ("gateway/dispatch/health/live.py", "gateway.dispatch.health.sharing"),
    ],
)
def test_a_circle_inside_a_package_breaks_the_contract(
    tree: Path, module: str, imported: str
) -> None:
    path = tree / module
    path.write_text(
        path.read_text() + f"\n\ndef _sneak() -> None:\n    import {imported}  # noqa\n"
    )
    result = lint_imports(tree)
    assert result.returncode != 0
    importer, other = module.removesuffix(".py").rsplit("/", 1)[1], imported.rsplit(".", 1)[1]
    # the contract names an import that would break the circle: either way round
    assert (
        f".{importer} -> .{other}" in result.stdout or f".{other} -> .{importer}" in result.stdout
    )
