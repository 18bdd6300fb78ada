"""``gpu_layers: auto`` follows the memory plan."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from backends.llamacpp.settings import LlamaCppSettings, auto_gpu_layers


def settings(model: Path, **extra: object) -> LlamaCppSettings:
    return LlamaCppSettings.model_validate(
        {"name": "x", "backend": "llamacpp", "model": str(model), **extra}
    )


def test_auto_is_accepted_and_bad_counts_are_not(tiny_model: Path) -> None:
    assert settings(tiny_model, gpu_layers="auto").gpu_layers == "auto"
    with pytest.raises(ValidationError):
        settings(tiny_model, gpu_layers=-2)
    with pytest.raises(ValidationError):
        settings(tiny_model, gpu_layers="most")


def test_auto_offloads_nothing_without_a_gpu(tiny_model: Path) -> None:
    # this machine has no GPU: the plan lands on host RAM, so no layer is offloaded
    assert auto_gpu_layers(settings(tiny_model, gpu_layers="auto")) == 0
