"""Stall detection for the llama.cpp scheduler thread.

The scheduler thread stamps :attr:`Scheduler.progress_at` after every decode step (a prefill
chunk, or one token for every running sequence) and when it is handed work while asleep. An
engine that has work (busy sequences or queued jobs) and no such stamp for ``timeout_s`` is
stalled: a decode that never returns, a step that decodes nothing, a dead thread. The engine
checks from the event loop every :func:`check_interval` seconds, so the thread pays one clock
read per step and nothing per token.
"""

from __future__ import annotations


class StallWatch:
    """Whether an engine with work has gone ``timeout_s`` without progress; fed timestamps,
    so it holds no clock and no thread of its own."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.stalled = False

    def observe(self, now: float, progress_at: float, pending: bool) -> bool | None:
        """Update from one look at the engine: ``pending`` (it has work) and the time of its
        last progress. Returns the new state when it changed (True: stalled now, False:
        moving again or idle), else None."""
        stalled = pending and now - progress_at > self.timeout_s
        if stalled == self.stalled:
            return None
        self.stalled = stalled
        return stalled


def check_interval(timeout_s: float) -> float:
    """How often to look: a quarter of the timeout, between 10 ms and 1 s (a stall is seen
    at most this late; a look costs a few attribute reads)."""
    return min(1.0, max(0.01, timeout_s / 4))
