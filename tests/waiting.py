"""Waiting on what a server does after it answered (an access line, a settled spend)."""

from __future__ import annotations

import time
from collections.abc import Callable


def eventually(condition: Callable[[], bool], timeout_s: float = 30.0) -> bool:
    """Whether ``condition`` holds within ``timeout_s``: asked every 50 ms, then once more."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()
