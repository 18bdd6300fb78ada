"""Model configs for planner tests (the published config.json numbers of two Llama models)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.planner import ModelShape, shape_from_hf_config

DATA = Path(__file__).parent / "data"


def load_config(name: str) -> dict[str, Any]:
    """A config.json from ``data/``."""
    config: dict[str, Any] = json.loads((DATA / f"{name}.config.json").read_text())
    return config


@pytest.fixture
def llama_31_8b() -> dict[str, Any]:
    return load_config("llama-3.1-8b")


@pytest.fixture
def llama_3_70b() -> dict[str, Any]:
    return load_config("llama-3-70b")


@pytest.fixture
def shape8(llama_31_8b: dict[str, Any]) -> ModelShape:
    return shape_from_hf_config(llama_31_8b, name="llama-3.1-8b")


@pytest.fixture
def shape70(llama_3_70b: dict[str, Any]) -> ModelShape:
    return shape_from_hf_config(llama_3_70b, name="llama-3-70b")
