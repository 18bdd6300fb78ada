"""A background step repeated at a fixed interval, for the app's lifespan."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

# how long :meth:`Periodic.stop` waits for the cancelled loop before cancelling it again
_RECANCEL_S = 0.5


class Periodic:
    """Runs ``step`` every ``interval_s`` seconds, from :meth:`start` until :meth:`stop`
    (``at_once``: the first run right at the start)."""

    def __init__(
        self, interval_s: float, step: Callable[[], Awaitable[object]], *, at_once: bool = False
    ) -> None:
        self.interval_s = interval_s
        self._step = step
        self._at_once = at_once
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def start(self) -> None:
        self._stopping = False
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Stop the loop and wait for it, even when a step swallowed the cancellation.

        A client library may turn a cancellation that lands in its own timeout into an
        error of its own (redis-py: a ``TimeoutError``), which the step then handles as an
        outage: the loop would sleep on, and a shutdown awaiting it would never finish.
        So the loop also checks a flag, and the cancellation is repeated until it is done.
        """
        task, self._task = self._task, None
        if task is None:
            return
        self._stopping = True
        while not task.done():
            task.cancel()
            await asyncio.wait([task], timeout=_RECANCEL_S)
        with contextlib.suppress(asyncio.CancelledError):
            task.result()

    async def _run(self) -> None:
        if self._at_once:
            await self._step()
        while not self._stopping:
            await asyncio.sleep(self.interval_s)
            if self._stopping:
                return
            await self._step()
