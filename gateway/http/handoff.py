"""A worker's drain that keeps its KV caches: the handoff window.

On SIGTERM a worker stops taking new requests (readiness and the API answer 503) and lets
its streams finish, as every server here does. With a handoff window (``shunter worker
--handoff-s``), it then keeps serving its KV exports (``GET /v1/worker/kv/{link}``) and its
figures (``GET /v1/worker/stats``, which say ``draining: true``) before it exits: a gateway
polling it sees the drain and moves its held sequences to their peers
(:meth:`gateway.dispatch.routing.moving.KvMoving.hand_off`), so that the conversations
they hold are found cached there afterwards.

The window ends early once every held sequence has been exported, or when no export has
been asked for ``idle_s`` (no gateway is taking them: a gateway polls every second).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import structlog

from gateway.dispatch import Gateway

log = structlog.get_logger("shunter.server")

_LOOK_S = 0.1


@dataclass(frozen=True)
class Handoff:
    """How long a draining worker keeps its KV exports open after its last stream ended
    (``window_s``), and how long without an export ends that early (``idle_s``)."""

    window_s: float = 15.0
    idle_s: float = 3.0


async def drain_and_hand_off(gateway: Gateway, drain_timeout_s: float, handoff: Handoff) -> None:
    """Wait for the streams to end (at most ``drain_timeout_s``), then for the handoff."""
    started = time.monotonic()
    while _in_flight(gateway) and time.monotonic() - started < drain_timeout_s:
        await asyncio.sleep(_LOOK_S)
    ended = time.monotonic()
    exports = gateway.fleet.kv_exports
    why = "window over"
    while time.monotonic() - ended < handoff.window_s:
        held = [s for b in gateway.backends.values() for s in b.stats().held_sequences]
        if exports.covers(held):
            why = "every held sequence exported" if held else "nothing held"
            break
        if time.monotonic() - max(ended, exports.last_at or ended) >= handoff.idle_s:
            why = f"no export asked for {handoff.idle_s:g}s"
            break
        await asyncio.sleep(_LOOK_S)
    log.info(
        "handoff_over",
        reason=why,
        exported=len(exports.links),
        seconds=round(time.monotonic() - ended, 3),
    )


def _in_flight(gateway: Gateway) -> int:
    return sum(backend.stats().in_flight for backend in gateway.backends.values())
