"""Mid-stream stalls: a stream that sends nothing for its deployment's ``timeouts.stall_s``
fails with :class:`~gateway.errors.StalledError` (which a resume then continues elsewhere,
:mod:`gateway.dispatch.midstream.resume`)."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.dispatch.failover.attempts import Candidate
from gateway.errors import StalledError
from gateway.protocol.frames import Stream, Wrapped


class StallGuard(Wrapped):
    """A stream that fails with :class:`~gateway.errors.StalledError` when its next
    frame takes longer than ``stall_s``. Only the wait for the upstream counts, not the
    time the client takes to read; one timer per stream, re-armed lazily (no per-frame
    timer), cancels the wait as ``asyncio.timeout`` would."""

    def __init__(self, inner: Stream[Any], stall_s: float, deployment: str) -> None:
        self._inner = inner
        self._stall_s = stall_s
        self._deployment = deployment
        self._loop = asyncio.get_running_loop()
        self._task: asyncio.Task[Any] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._since: float | None = None
        self._fired = False
        self._cancelling = 0

    def __aiter__(self) -> StallGuard:
        return self

    async def __anext__(self) -> Any:
        loop = self._loop
        self._since = loop.time()
        if self._timer is None:
            self._task = asyncio.current_task()
            self._timer = loop.call_at(self._since + self._stall_s, self._check)
        try:
            return await anext(self._inner)
        except asyncio.CancelledError as exc:
            task = self._task
            if self._fired and task is not None and task.uncancel() <= self._cancelling:
                self._fired = False
                raise StalledError(
                    f"deployment {self._deployment!r} sent nothing for {self._stall_s:g}s "
                    "mid-stream"
                ) from exc
            raise
        finally:
            self._since = None

    async def aclose(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        await self._inner.aclose()

    def _check(self) -> None:
        self._timer = None
        since, now = self._since, self._loop.time()
        if since is not None and now - since >= self._stall_s and self._task is not None:
            self._fired = True
            self._cancelling = self._task.cancelling()
            self._task.cancel()
            return
        wait = self._stall_s if since is None else self._stall_s - (now - since)
        self._timer = self._loop.call_later(wait, self._check)


def stall_guard(stream: Stream[Any], candidate: Candidate) -> Stream[Any]:
    """``stream`` under its deployment's ``stall_s`` (itself when it has none)."""
    stall_s = candidate.settings.timeouts.stall_s
    if stall_s is None:
        return stream
    return StallGuard(stream, stall_s, candidate.settings.name)
