"""Moving a conversation's KV cache to the engine a request goes to, where that is faster
than prefilling it there again.

Before each attempt on a deployment that moves KV (``capabilities.kv_move``), the
request's prefix chain is looked up over every candidate of its model, the ones routing
dropped too (a draining, unhealthy or saturated home): where another engine with the same
KV fingerprint holds more of it, :func:`policies.kvmove.predict_move` prices the move
against the re-prefill. A move that pays is made: the holder's export streamed into the
target's import, then the request goes on to the target. One that does not is skipped, and
one that fails (refused, busy, gone, out of time) costs only its time: the request goes on
as it would have. Either way the route reason says so (``moved 52 MB from w1 in 0.24 s;
re-prefill predicted 25.4 s``, ``move skipped: ...``, ``move failed: ...``).

Moves of one prefix to one target run one at a time (a lock per pair): a second request of
the conversation waits for the first's move, then finds the target holding it. Moves into
one target queue behind each other (an engine takes one import at a time, and a move
refused as busy would cost its request the whole re-prefill); nothing else waits. Each move
done teaches the target's rates (:meth:`DeploymentTracker.learn_move`).

:meth:`KvMoving.hand_off` moves a draining engine's held sequences, most recently used
first, to its compatible peers (the gateway side of a worker's drain).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import structlog

from backends.base import Backend
from gateway.common.periodic import Periodic
from gateway.dispatch.failover.attempts import Candidate
from gateway.dispatch.health.fleet import Fleet
from gateway.dispatch.health.moves import MoveRecord
from gateway.errors import GatewayError
from policies import Candidate as PolicyCandidate
from policies import RequestFacts
from policies.kvmove import MoveEstimate, megabytes, predict_move

log = structlog.get_logger("shunter.kv_moves")

MOVE_TIMEOUT_FLOOR_S = 10.0
"""The least time a move gets, whatever its prediction (it gets four times that too)."""

MOVED_TTL_S = 30.0
"""How long a prefix moved to a target is not moved there again (the target's report of
holding it is a poll away)."""

HANDOFF_MAX = 16
"""Sequences moved off one draining engine at most."""

HANDOFF_TIMEOUT_S = 60.0
"""The time one move of a drain's handoff gets."""

HANDOFF_DEADLINE_S = 300.0
"""The longest one drain's handoff runs."""

HANDOFF_RETRY_S = 0.5
"""How soon a handoff asks again for a sequence that was still running."""


@dataclass(frozen=True)
class Moved:
    """What a move did, as the route reason says it."""

    text: str
    ok: bool
    code: str | None = None
    """A failed move's error code (``kv_busy``, ``kv_not_found``...), where it had one."""


class KvMoving:
    """The gateway's KV moves: before attempts, and off draining engines."""

    def __init__(self, fleet: Fleet) -> None:
        self._fleet = fleet
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._importing: dict[str, asyncio.Lock] = {}  # per target: one import at a time
        self._moved: dict[tuple[str, str], float] = {}
        self._handing: dict[str, asyncio.Task[None]] = {}
        self._drains = Periodic(1.0, self.watch_drains)

    def start(self) -> None:
        """Watch for draining engines (every second: as often as a worker is polled)."""
        self._drains.start()

    def may_move(self, names: Sequence[str]) -> bool:
        """Whether two of these deployments move KV (a move may happen between them)."""
        backends = self._fleet.backends
        return sum(1 for n in names if n in backends and backends[n].capabilities.kv_move) > 1

    def preparing(
        self,
        request: RequestFacts,
        notes: list[str],
        pool: Callable[[], Sequence[PolicyCandidate]],
    ) -> Callable[[Candidate], Awaitable[None]]:
        """What runs before the first attempt on each candidate: the request's KV moved to
        it where that pays (what was done appended to ``notes``; ``pool``: the model's
        candidates now, read before the attempt records its chain as sent there)."""

        async def move_first(candidate: Candidate) -> None:
            moved = await self.before(candidate.settings.name, request, pool())
            if moved is not None:
                notes.append(moved.text)

        return move_first

    async def before(
        self, target: str, request: RequestFacts, pool: Sequence[PolicyCandidate]
    ) -> Moved | None:
        """Move the request's KV to ``target`` if that pays (see the module docstring);
        what was done, or ``None`` where no other engine holds more of it."""
        backend = self._fleet.backends.get(target)
        if backend is None or not backend.capabilities.kv_move or not request.prefix_chain:
            return None
        names = [c.name for c in pool]
        if target not in names:
            return None
        estimate = predict_move(request, pool, names.index(target))
        if estimate is None:
            return None
        if not estimate.pays:
            return Moved(f"move skipped: {estimate.why_not}", False)
        key = (target, estimate.link)
        if self._fresh(key):
            return None
        lock = self._locks.setdefault(key, asyncio.Lock())
        try:
            async with lock:
                if self._fresh(key):
                    return None
                return await self._move(estimate, target, "request")
        finally:
            if not lock.locked() and self._locks.get(key) is lock:
                del self._locks[key]

    def _fresh(self, key: tuple[str, str]) -> bool:
        """Whether this prefix was moved to this target lately."""
        at = self._moved.get(key)
        if at is None:
            return False
        if time.monotonic() - at < MOVED_TTL_S:
            return True
        del self._moved[key]
        return False

    async def _move(
        self, estimate: MoveEstimate, target: str, cause: Literal["request", "drain"]
    ) -> Moved:
        """Export from the estimate's source into ``target``; its report."""
        backends = self._fleet.backends
        source, sink = backends[estimate.source_name], backends[target]
        again = estimate.reprefill_ms
        predicted = "" if again is None else f"; re-prefill predicted {again / 1000:.1f} s"
        started = time.perf_counter()
        limit = max(MOVE_TIMEOUT_FLOOR_S, 4 * estimate.move_ms / 1000)
        importing = self._importing.setdefault(target, asyncio.Lock())
        try:
            async with asyncio.timeout(limit):  # the wait for the target's turn too
                await importing.acquire()
            try:
                started = time.perf_counter()  # the move's own time, not its wait
                async with asyncio.timeout(limit):
                    n_bytes, tokens, import_s = await _pipe(source, sink, estimate.link)
            finally:
                importing.release()
        except (GatewayError, TimeoutError, OSError) as exc:
            seconds = time.perf_counter() - started
            why = _why(exc, limit)
            self._record(estimate.source_name, target, cause, seconds, error=why)
            log.warning(
                "kv_move_failed", source=estimate.source_name, target=target, error=why,
                seconds=round(seconds, 3), cause=cause,
            )  # fmt: skip
            text = f"move failed: {why} from {estimate.source_name} after {seconds:.2f} s"
            code = exc.code if isinstance(exc, GatewayError) else None
            return Moved(text + predicted, False, code)
        seconds = time.perf_counter() - started
        self._moved[(target, estimate.link)] = time.monotonic()
        tracker = self._fleet.trackers.get(target)
        if tracker is not None:
            tracker.learn_move(n_bytes, tokens, max(seconds - import_s, 1e-3), import_s)
        self._record(estimate.source_name, target, cause, seconds, n_bytes, tokens)
        text = f"moved {megabytes(n_bytes)} from {estimate.source_name} in {seconds:.2f} s"
        log.info(
            "kv_moved", source=estimate.source_name, target=target, bytes=n_bytes,
            tokens=tokens, seconds=round(seconds, 3), cause=cause,
        )  # fmt: skip
        return Moved(text + predicted, True)

    def _record(
        self,
        source: str,
        target: str,
        cause: Literal["request", "drain"],
        seconds: float,
        n_bytes: int = 0,
        tokens: int = 0,
        error: str | None = None,
    ) -> None:
        outcome: Literal["moved", "failed"] = "failed" if error else "moved"
        self._fleet.moves.add(
            MoveRecord(time.time(), source, target, cause, outcome, n_bytes, tokens, seconds, error)
        )

    # --- a draining engine's handoff ----------------------------------------------------

    async def watch_drains(self) -> None:
        """Start a handoff for every draining engine that moves KV (once per drain)."""
        backends = self._fleet.backends
        for name, backend in backends.items():
            if name in self._handing or not backend.capabilities.kv_move:
                continue
            if backend.stats().draining:
                task = asyncio.get_running_loop().create_task(self.hand_off(name))
                self._handing[name] = task
        for name, task in list(self._handing.items()):
            known = backends.get(name)
            if task.done() and (known is None or not known.stats().draining):
                del self._handing[name]  # it came back, or went: a next drain starts anew

    async def hand_off(self, name: str) -> None:
        """Move ``name``'s held sequences, most recently used first, each to the compatible
        peer with the most free sequences, until done or the engine is gone; at most
        :data:`HANDOFF_MAX`."""
        source = self._fleet.backends[name]
        fingerprint = source.stats().kv_fingerprint
        peers = [peer for peer in self._fleet.backends if peer != name]
        done: set[str] = set()
        busy: set[str] = set()
        given: dict[str, int] = {}
        room: dict[str, int] = {}
        deadline = time.monotonic() + HANDOFF_DEADLINE_S
        while len(done) < HANDOFF_MAX and time.monotonic() < deadline:
            stats = source.stats()
            todo = [link for link, _ in stats.held_sequences if link not in done]
            if not stats.draining or not todo:
                return
            ready = [link for link in todo if link not in busy]
            if not ready:  # each still running: ask again shortly
                busy.clear()
                await asyncio.sleep(HANDOFF_RETRY_S)
                continue
            target = self._peer(peers, fingerprint, given, room)
            if target is None:
                return
            given[target] = given.get(target, 0) + 1
            depth = dict(stats.held_sequences)[ready[0]]
            moved = await self._move(_handoff_estimate(name, ready[0], depth), target, "drain")
            if moved.ok or moved.code == "kv_not_found":
                done.add(ready[0])
            elif moved.code == "kv_busy":
                busy.add(ready[0])
            else:
                return  # gone, refused, out of time: what is left stays

    def _peer(
        self,
        peers: Sequence[str],
        fingerprint: str | None,
        given: Mapping[str, int],
        room: dict[str, int],
    ) -> str | None:
        """The compatible peer with the most free sequences (least loaded), of those with
        room left: a peer takes as many sequences as it held nothing in when the handoff
        began, and half of the others (an import takes a peer's emptiest idle sequence:
        half its own caches stay). ``room`` keeps each peer's allowance, set when first
        seen."""
        backends = self._fleet.backends
        best: tuple[int, str] | None = None
        for name in peers:
            backend = backends.get(name)
            if backend is None or not backend.capabilities.kv_move:
                continue
            stats = backend.stats()
            if stats.draining or fingerprint is None or stats.kv_fingerprint != fingerprint:
                continue
            if name not in room:
                total = stats.slots_total or 0
                empty = max(total - len(stats.held_sequences), 0)
                room[name] = max(empty + (total - empty) // 2, 1)
            if given.get(name, 0) >= room[name]:
                continue
            free = (stats.slots_total or 0) - max(stats.slots_busy or 0, stats.in_flight)
            if best is None or free > best[0]:
                best = free, name
        return None if best is None else best[1]

    async def aclose(self) -> None:
        """Stop watching, and the handoffs in progress."""
        await self._drains.stop()
        tasks = list(self._handing.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._handing.clear()


def _handoff_estimate(source: str, link: str, tokens: int) -> MoveEstimate:
    """A drain's move of one held sequence: no request to compare with, it always pays
    (and gets :data:`HANDOFF_TIMEOUT_S`)."""
    return MoveEstimate(
        source=0, target=0, source_name=source, link=link, tokens=tokens, spared=tokens,
        n_bytes=0, move_ms=HANDOFF_TIMEOUT_S * 1000 / 4, reprefill_ms=None, min_tokens=0,
    )  # fmt: skip


async def _pipe(source: Backend, target: Backend, link: str) -> tuple[int, int, float]:
    """``source``'s export of ``link`` streamed into ``target``'s import: the bytes, the
    tokens and the import's own seconds."""
    header, chunks = await source.export_kv(link)
    try:
        done = await target.import_kv(header, chunks)
    finally:
        await _aclose(chunks)
    return done.bytes, done.tokens, done.seconds


async def _aclose(chunks: AsyncIterator[bytes]) -> None:
    close = getattr(chunks, "aclose", None)
    if close is not None:
        with contextlib.suppress(Exception):
            await close()


def _why(exc: BaseException, limit: float) -> str:
    """A failed move's cause, short: the error's code and status, or what happened."""
    if isinstance(exc, TimeoutError):
        return f"timed out after {limit:.0f} s"
    if isinstance(exc, GatewayError):
        status = exc.upstream_status or exc.status_code
        return f"{exc.code or type(exc).__name__} ({status})"
    return type(exc).__name__
