"""A background step repeated at a fixed interval, for the app's lifespan."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable


class Periodic:
    """Runs ``step`` every ``interval_s`` seconds, from :meth:`start` until :meth:`stop`."""

    def __init__(self, interval_s: float, step: Callable[[], Awaitable[object]]) -> None:
        self.interval_s = interval_s
        self._step = step
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self._step()
