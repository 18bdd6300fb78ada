"""Settlements the state store could not take when a request ended, written again until
it takes them.

A request's cost is settled when it ends: added to its key's spend (its hold dropped) and
to its session's books. When the store cannot be reached then (Redis restarting, a Cluster
primary failing over), the settlement is kept here with the write that records it, and
that write is tried again in the background every ``retry_s`` until the store takes it;
meanwhile what is kept still counts against the key's budget in this process. The store
applies one settlement per hold id, so a write that landed although its answer was lost
is not counted twice. A settlement still unrecorded after ``give_up_s`` (a hold's
lifetime) is dropped, with an error in the log; what is kept when the process stops is
lost (the log said so when it was kept).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

from gateway.state.base import StateUnavailable

log = structlog.get_logger("shunter.limits")


@dataclass(frozen=True)
class Unsettled:
    """One settlement not yet recorded: where (``what``: ``budget`` or ``session``), how
    much, and the write that records it."""

    what: str
    scope: str
    window_s: int
    usd: float
    write: Callable[[], Awaitable[object]]
    since: float


class Settlements:
    """The settlements of one process that wait for the store; nothing runs while none do."""

    def __init__(
        self,
        *,
        retry_s: float = 0.5,
        give_up_s: float = 900.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.retry_s = retry_s
        self.give_up_s = give_up_s
        self._clock = clock
        self._kept: list[Unsettled] = []
        self._task: asyncio.Task[None] | None = None
        self._flushing = asyncio.Lock()

    def keep(
        self,
        what: str,
        scope: str,
        window_s: int,
        usd: float,
        write: Callable[[], Awaitable[object]],
    ) -> None:
        """Keep a settlement the store refused, and retry it in the background."""
        self._kept.append(Unsettled(what, scope, window_s, usd, write, self._clock()))
        log.warning("spend_not_recorded_yet", what=what, scope=scope, usd=usd)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._retry())

    def usd(self, scope: str, window_s: int) -> float:
        """What kept settlements of ``scope``'s budget window add to its spend."""
        return sum(u.usd for u in self._kept if u.scope == scope and u.window_s == window_s)

    @property
    def total_usd(self) -> float:
        return sum(u.usd for u in self._kept)

    async def flush(self) -> None:
        """Try each kept settlement once, in order; stop at the first the store refuses.
        One flush at a time: the retry loop's and a request's would write twice."""
        if not self._kept:
            return
        async with self._flushing:
            while self._kept:
                item = self._kept[0]
                try:
                    await item.write()
                except StateUnavailable:
                    if self._clock() - item.since < self.give_up_s:
                        return
                    log.error("spend_not_recorded", what=item.what, scope=item.scope, usd=item.usd)
                else:
                    late = round(self._clock() - item.since, 3)
                    log.info("spend_recorded", what=item.what, scope=item.scope, late_s=late)
                self._kept.pop(0)

    async def _retry(self) -> None:
        while self._kept:
            await asyncio.sleep(self.retry_s)
            await self.flush()
