"""Devices as plain data, declared in config or discovered on this machine."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

DeviceKind = Literal["cuda", "metal", "cpu"]

GIB = 1 << 30


def gib(n: float) -> str:
    """Bytes as GiB, for people."""
    return f"{n / GIB:.2f} GiB"


APPLE_GPU_SHARE = 0.75
"""Share of unified memory Metal lets one process wire (about macOS's
``recommendedMaxWorkingSetSize`` on most machines)."""


@dataclass(frozen=True)
class Device:
    """A memory pool a model can be placed in."""

    name: str
    kind: DeviceKind
    memory_bytes: int

    @classmethod
    def declared(cls, name: str, kind: DeviceKind, memory_gb: float) -> Device:
        """A device from config; ``memory_gb`` counts GiB (2**30 bytes), as nvidia-smi does."""
        return cls(name, kind, int(memory_gb * GIB))


def discover_devices() -> list[Device]:
    """CUDA GPUs (through NVML, if ``pynvml`` is installed), Apple's GPU, and host RAM.

    On macOS the GPU's share of unified memory is reported as a ``metal`` device. The
    host (``cpu``) is always listed, with its total RAM.
    """
    devices = nvml_devices(_import_optional("pynvml"))
    if sys.platform == "darwin":
        memsize = apple_memory_bytes()
        if memsize:
            devices.append(Device("apple-gpu", "metal", int(memsize * APPLE_GPU_SHARE)))
    ram = ram_bytes()
    if ram:
        devices.append(Device("cpu", "cpu", ram))
    return devices


def _import_optional(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def nvml_devices(nvml: Any) -> list[Device]:
    """CUDA devices from an NVML module (``pynvml`` or a stand-in); [] if NVML fails."""
    if nvml is None:
        return []
    try:
        nvml.nvmlInit()
    except Exception:
        return []
    try:
        found = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            raw = nvml.nvmlDeviceGetName(handle)
            label = raw.decode() if isinstance(raw, bytes) else str(raw)
            total = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
            found.append(Device(f"cuda:{index} {label}", "cuda", total))
        return found
    except Exception:
        return []
    finally:
        nvml.nvmlShutdown()


def apple_memory_bytes(run: Callable[..., Any] = subprocess.run) -> int | None:
    """``sysctl -n hw.memsize``, or ``None`` when it cannot be read."""
    try:
        result = run(
            ["sysctl", "-n", "hw.memsize"], capture_output=True, text=True, timeout=5, check=True
        )
        return int(str(result.stdout).strip())
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


def ram_bytes(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """Total RAM: ``MemTotal`` from /proc/meminfo, else ``os.sysconf`` pages x page size."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError, AttributeError):
        return None
