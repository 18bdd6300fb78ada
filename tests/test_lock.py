"""The dependency locks (written by scripts/lock.sh) pin every package pyproject.toml asks
for, at a version it allows, with hashes; the runtime lock and the development lock agree."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
_PIN = re.compile(r"^([A-Za-z0-9._-]+)==([^\s;\\]+)")


def pins(name: str) -> dict[str, str]:
    """Package -> version of a lock; every pin must carry at least one sha256."""
    text = (ROOT / name).read_text(encoding="utf-8")
    found: dict[str, str] = {}
    for entry in re.split(r"\n(?=\S)", text):
        match = _PIN.match(entry)
        if match is None:
            assert entry.startswith("#") or not entry.strip(), f"{name}: unpinned {entry!r}"
            continue
        assert "--hash=sha256:" in entry, f"{name}: {match.group(1)} has no hash"
        found[canonicalize_name(match.group(1))] = match.group(2)
    return found


def wanted(extra: str | None) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    listed = project["dependencies"] + (project["optional-dependencies"][extra] if extra else [])
    return [Requirement(line) for line in listed]


@pytest.mark.parametrize(
    ("lock", "extra"),
    [
        ("requirements.lock", None),
        ("requirements-dev.lock", "dev"),
        ("requirements-gpu.lock", "vllm"),
    ],
)
def test_every_dependency_is_pinned_with_hashes_at_an_allowed_version(
    lock: str, extra: str | None
) -> None:
    pinned = pins(lock)
    for requirement in wanted(extra):
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{lock} lacks {requirement}: run scripts/lock.sh"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (
            f"{lock} pins {name}=={pinned[name]}, outside {requirement}: run scripts/lock.sh"
        )


def test_both_locks_pin_the_runtime_alike() -> None:
    runtime, development = pins("requirements.lock"), pins("requirements-dev.lock")
    assert {n: development.get(n) for n in runtime} == runtime
