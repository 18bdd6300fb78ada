"""Prefill and decode speed, as the scheduler thread measures its steps."""

from __future__ import annotations

import threading
import time
from collections import deque

RATE_WINDOW_S = 10.0


class Rates:
    """Prefill and decode speed over the steps of the last ``RATE_WINDOW_S``: tokens per
    second of the decode time of the steps that did that work (a step that did both counts
    for both), so that an engine that is mostly idle still reports how fast it works, as
    llama.cpp's own ``prompt_tokens_seconds`` does."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._samples: deque[tuple[float, int, int, float]] = deque()

    def add(self, prefill: int, decode: int, seconds: float) -> None:
        now = time.monotonic()
        with self._lock:
            self._samples.append((now, prefill, decode, seconds))
            while self._samples and now - self._samples[0][0] > RATE_WINDOW_S:
                self._samples.popleft()

    def per_second(self) -> tuple[float | None, float | None]:
        now = time.monotonic()
        with self._lock:
            recent = [s for s in self._samples if now - s[0] <= RATE_WINDOW_S]
        return _speed(recent, 1), _speed(recent, 2)


def _speed(samples: list[tuple[float, int, int, float]], column: int) -> float | None:
    tokens = sum(s[column] for s in samples)
    seconds = sum(s[3] for s in samples if s[column])
    return tokens / seconds if tokens and seconds > 0 else None
