"""What the gateway knows of the KV moves it made: recent ones, tallies per pair, and on
the worker side what its drain has handed over.

:class:`MoveLog` keeps the last :data:`RECENT_MOVES` moves (made or failed) for the status
page, and per (source, target) pair the moves, failures, bytes and seconds, read by the
Prometheus collector at scrape time. :class:`KvExports` is a worker's own record of the
states it exported, which ends its drain's handoff window once every held sequence went.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

RECENT_MOVES = 64
"""Moves the status page lists at most (the oldest go first)."""

Outcome = Literal["moved", "failed"]


@dataclass(frozen=True)
class MoveRecord:
    """One move: when (wall clock), between which deployments, why (``request``: a
    request placed away from its KV; ``drain``: a draining engine's handoff), what it
    moved and how long it took, or why it failed."""

    at: float
    source: str
    target: str
    cause: Literal["request", "drain"]
    outcome: Outcome
    n_bytes: int = 0
    tokens: int = 0
    seconds: float = 0.0
    error: str | None = None


@dataclass
class PairTally:
    """Moves between one pair of deployments, since start."""

    moved: int = 0
    failed: int = 0
    n_bytes: int = 0
    seconds: float = 0.0


class MoveLog:
    """Recent moves and the tallies per pair (see the module docstring)."""

    def __init__(self, recent: int = RECENT_MOVES) -> None:
        self.recent: deque[MoveRecord] = deque(maxlen=recent)
        self.pairs: dict[tuple[str, str], PairTally] = {}

    def add(self, record: MoveRecord) -> None:
        """Keep ``record`` and count it for its pair."""
        self.recent.append(record)
        tally = self.pairs.setdefault((record.source, record.target), PairTally())
        tally.seconds += record.seconds
        if record.outcome == "moved":
            tally.moved += 1
            tally.n_bytes += record.n_bytes
        else:
            tally.failed += 1

    def forget(self, keep: Iterable[str]) -> None:
        """Drop the tallies of pairs with a deployment no longer configured (bounded labels)."""
        kept = set(keep)
        self.pairs = {k: v for k, v in self.pairs.items() if k[0] in kept and k[1] in kept}


@dataclass
class KvExports:
    """A worker's exports while it drains: the links the exported sequences held, and when
    the last export was asked for."""

    links: set[str] = field(default_factory=set)
    last_at: float | None = None
    """When the last export was asked for (monotonic clock), ``None`` before any."""

    def record(self, links: Iterable[str]) -> None:
        """A sequence holding ``links`` was exported."""
        self.links.update(links)
        self.last_at = time.monotonic()

    def asked(self) -> None:
        """An export was asked for (whether or not it succeeded)."""
        self.last_at = time.monotonic()

    def covers(self, sequences: Iterable[tuple[str, int]]) -> bool:
        """Whether every held sequence (its deepest link) was exported."""
        return all(link in self.links for link, _ in sequences)
