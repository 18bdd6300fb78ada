"""Hedged streams: start the best candidate; if its first frame is late, race the next one
too. The first stream to produce a frame wins; the other is cancelled and closed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import replace

import structlog

from gateway.dispatch.failover.attempts import Candidate
from gateway.dispatch.failover.rules import Opening, Routing
from gateway.dispatch.health.live import Attempt
from gateway.errors import GatewayError
from policies import Hedge

Opened = tuple[Candidate, tuple[Opening, Attempt]]
FirstSuccess = Callable[[Routing], Awaitable[Opened]]
log = structlog.get_logger("shunter.dispatch")


async def hedged(routing: Routing, hedge: Hedge, first_success: FirstSuccess) -> Opened:
    """``first_success`` along the candidates; after ``hedge.after_ms`` without a first
    frame, along the second candidate as well, whichever opens first."""
    first, second, *rest = routing.candidates
    lanes = [replace(routing, candidates=[first, *rest]), replace(routing, candidates=[second])]

    def run(lane: Routing) -> asyncio.Task[Opened]:
        return asyncio.ensure_future(first_success(lane))

    primary = run(lanes[0])
    tasks, winner, failure = {primary}, None, None
    try:
        done, _ = await asyncio.wait(tasks, timeout=hedge.after_ms / 1000)
        if done and (_client_fault(primary) or primary.exception() is None):
            winner = primary
            return primary.result()
        log.info("hedging", late=first.settings.name, backup=second.settings.name)
        tasks.add(run(lanes[1]))
        failure, pending = primary.exception() if done else None, tasks - done
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task.exception() is None or _client_fault(task):
                    winner = task
                    return task.result()
                failure = failure or task.exception()
    finally:
        losers = tasks - {winner}
        for task in losers:
            task.cancel()
        await _discard(losers)
    assert failure is not None
    raise failure


def _client_fault(task: asyncio.Task[Opened]) -> bool:
    """Did the request itself fail (a 4xx): no other candidate would do better."""
    exc = task.exception()
    return isinstance(exc, GatewayError) and not exc.counts_as_failure


async def _discard(tasks: set[asyncio.Task[Opened]]) -> None:
    """Wait for cancelled racers; a loser that still won its own race gets closed."""
    for task in tasks:
        with contextlib.suppress(BaseException):
            _, (opening, tracked) = await task
            tracked.finish(None)
            await opening.stream.aclose()
