"""Durations written for people: ``500ms``, ``90s``, ``15m``, ``12h``, ``30d``, ``2w``."""

from __future__ import annotations

import re

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$")
UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def split_duration(text: str) -> tuple[float, str | None] | None:
    """``(number, unit)`` of a duration (``unit`` None for a bare number), or None when
    ``text`` is not one."""
    match = _DURATION.match(text)
    if match is None:
        return None
    return float(match.group(1)), match.group(2)
