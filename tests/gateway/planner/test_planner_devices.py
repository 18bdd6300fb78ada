from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from gateway.planner import Device, discover_devices
from gateway.planner.devices import apple_memory_bytes, nvml_devices, ram_bytes


class FakeNvml:
    """The part of pynvml the planner uses."""

    def __init__(self, gpus: list[tuple[bytes | str, int]], fail_init: bool = False) -> None:
        self.gpus, self.fail_init, self.shut = gpus, fail_init, False

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> bytes | str:
        return self.gpus[handle][0]

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return SimpleNamespace(total=self.gpus[handle][1])


def test_declared_memory_counts_gib() -> None:
    assert Device.declared("gpu0", "cuda", 80) == Device("gpu0", "cuda", 80 * (1 << 30))


def test_nvml_devices() -> None:
    nvml = FakeNvml([(b"NVIDIA H100", 85_000_000_000), ("NVIDIA L4", 24_000_000_000)])
    assert nvml_devices(nvml) == [
        Device("cuda:0 NVIDIA H100", "cuda", 85_000_000_000),
        Device("cuda:1 NVIDIA L4", "cuda", 24_000_000_000),
    ]
    assert nvml.shut


def test_nvml_absent_or_failing() -> None:
    assert nvml_devices(None) == []
    assert nvml_devices(FakeNvml([], fail_init=True)) == []


def test_ram_from_meminfo(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16384000 kB\nMemFree:  1 kB\n")
    assert ram_bytes(meminfo) == 16384000 * 1024
    assert (ram_bytes(tmp_path / "absent") or 0) > 0  # falls back to os.sysconf


def test_apple_memsize() -> None:
    def run(args: list[str], **_: Any) -> Any:
        assert args == ["sysctl", "-n", "hw.memsize"]
        return SimpleNamespace(stdout="68719476736\n")

    def broken(args: list[str], **_: Any) -> Any:
        raise subprocess.CalledProcessError(1, args)

    assert apple_memory_bytes(run) == 64 * (1 << 30)
    assert apple_memory_bytes(broken) is None


def test_discover_lists_host_memory() -> None:
    devices = discover_devices()
    host = [d for d in devices if d.kind == "cpu"]
    assert len(host) == 1
    assert host[0].memory_bytes > 0
    if sys.platform != "darwin":
        assert all(d.kind != "metal" for d in devices)
