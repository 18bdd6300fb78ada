"""The server keeps large freed buffers for reuse, unless the environment tunes malloc."""

from __future__ import annotations

import platform

import pytest

from gateway.http.server import keep_large_buffers


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="a glibc setting")
def test_glibc_takes_the_thresholds() -> None:
    assert keep_large_buffers({}) is True


@pytest.mark.parametrize("name", ["MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"])
def test_an_operator_setting_in_the_environment_wins(name: str) -> None:
    assert keep_large_buffers({name: "131072"}) is False
