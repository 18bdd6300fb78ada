"""The last route decisions, for the status page: a bounded ring, newest last.

One tuple per finished API request; the oldest falls out once :data:`RECENT_MAX` are
held, so memory stays fixed whatever the traffic. Client-chosen text (the model name) is
cut short here, and the page escapes everything it shows.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from typing import Any, NamedTuple

RECENT_MAX = 200
_MAX_TEXT = 80


class Decision(NamedTuple):
    """One finished request: where it went, why, and how it went."""

    at: float
    request_id: str
    operation: str
    model: str
    deployment: str
    step: str
    status: int
    duration_ms: float
    ttft_ms: float | None
    input_tokens: int | None
    output_tokens: int | None
    route: str
    cache: bool


class RecentDecisions:
    """The ring of the last :data:`RECENT_MAX` requests' decisions."""

    def __init__(self, size: int = RECENT_MAX) -> None:
        self._ring: deque[Decision] = deque(maxlen=size)
        self.total = 0

    def add(
        self,
        request_id: str,
        operation: str,
        facts: Mapping[str, Any],
        deployment: str,
        step: str,
        status: int,
        duration_s: float,
    ) -> None:
        model = str(facts.get("model", ""))
        self.total += 1
        self._ring.append(
            Decision(
                time.time(),
                request_id,
                operation,
                model if len(model) <= _MAX_TEXT else model[:_MAX_TEXT] + "...",
                deployment,
                step,
                status,
                round(duration_s * 1000, 2),
                facts.get("ttft_ms"),
                facts.get("prompt_tokens"),
                facts.get("completion_tokens"),
                str(facts.get("route", "")),
                facts.get("cache") == "hit",
            )
        )

    def last(self, count: int) -> list[dict[str, Any]]:
        """The newest ``count`` decisions, newest first, as JSON-ready dicts."""
        items = list(self._ring)[-count:] if count > 0 else []
        return [d._asdict() for d in reversed(items)]
