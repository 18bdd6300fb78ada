"""Paths and helpers shared by the deploy checks."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
from pathlib import Path
from typing import Any

import pytest
import yaml

from backends.registry import BACKEND_KINDS
from gateway.config import GatewayConfig, load_config, parse_config

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUBERNETES = DEPLOY / "kubernetes"


DOCUMENTED_BACKEND_KINDS = frozenset({"llamacpp", "openai", "anthropic", "gemini", "vllm"})
# settings models of backends that may exist before the registry lists their kind
_SETTINGS_MODELS = {
    "openai": ("backends.openai.backend", "OpenAICompatSettings"),
    "anthropic": ("backends.anthropic.backend", "AnthropicSettings"),
    "vllm": ("backends.vllm.settings", "VLLMSettings"),
}


def parse_shunter(args: list[str]) -> argparse.Namespace:
    """Parse a ``shunter`` command line with the real CLI parser (fails on a bad flag)."""
    from gateway.cli.commands import _parser

    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            return _parser().parse_args(args)
    except SystemExit:
        raise AssertionError(f"shunter {' '.join(args)}: {errors.getvalue()}") from None


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def validate_routing(text: str, filename: str) -> GatewayConfig:
    """Validate routing YAML text like the gateway does (:func:`parse_config`)."""
    _check_backend_kinds(text, filename)
    return parse_config(text, filename)


def validate_routing_file(path: Path) -> GatewayConfig:
    """Validate a routing file like ``shunter serve --config`` does (:func:`load_config`)."""
    _check_backend_kinds(path.read_text(encoding="utf-8"), str(path))
    return load_config(path)


def _check_backend_kinds(text: str, filename: str) -> None:
    """Check what can be checked without the backends, then skip while a backend kind the
    file names is not registered yet (they land one by one)."""
    data = yaml.safe_load(text)
    kinds = {d.get("backend") for d in data.get("deployments", [])}
    unknown = kinds - DOCUMENTED_BACKEND_KINDS
    assert not unknown, f"{filename}: unknown backend kinds {sorted(map(str, unknown))}"
    names = {d.get("name") for d in data.get("deployments", [])}
    for model, route in data.get("models", {}).items():
        dangling = set(route.get("candidates", [])) - names
        assert not dangling, f"{filename}: model {model} names unknown deployments {dangling}"
    for deployment in data.get("deployments", []):
        if deployment.get("backend") not in BACKEND_KINDS:
            _validate_deployment_alone(deployment, filename)
    missing = sorted(str(k) for k in kinds - set(BACKEND_KINDS))
    if missing:
        pytest.skip(f"{filename}: backend kinds not registered yet: {', '.join(missing)}")


def _validate_deployment_alone(deployment: dict[str, Any], filename: str) -> None:
    """Validate one deployment with its backend's settings model, where that exists yet."""
    module_name, class_name = _SETTINGS_MODELS[deployment["backend"]]
    try:
        model = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError):
        return
    model.model_validate(deployment)  # raises pydantic.ValidationError naming the field
