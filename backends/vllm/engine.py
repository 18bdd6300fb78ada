"""The engine-facing layer of the vLLM backend, with no vLLM import.

:class:`EngineClient` is the part of vLLM's ``AsyncLLM`` the adapter calls itself (abort,
sleep, wake-up, shutdown); :class:`Frontend` is vLLM's OpenAI serving layer driven in
process (it calls ``AsyncLLM.generate`` with DELTA outputs). A :class:`Runtime` bundles
both; ``backends/vllm/compat.py`` builds the real one and the tests a fake one.

:class:`StatsRecorder` turns what vLLM's stat loggers receive after every engine step into
:class:`LiveStats`; :class:`Activity` counts requests for draining and idle sleep.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from backends.base import LiveStats

if TYPE_CHECKING:
    from backends.vllm.settings import VLLMSettings

Endpoint = Literal["chat", "completion"]
Reply = dict[str, Any] | AsyncIterator[str]
"""A whole response or error as JSON data, or a stream of SSE frames (``data: ...``)."""

log = logging.getLogger(__name__)

RATE_WINDOW_S = 10.0
PREFIX_WINDOW_S = 60.0


class EngineClient(Protocol):
    """What the adapter calls on ``vllm.v1.engine.async_llm.AsyncLLM`` directly."""

    @property
    def errored(self) -> bool: ...

    async def abort(self, request_id: str) -> None: ...

    async def sleep(self, level: int = 1) -> None: ...

    async def wake_up(self, tags: list[str] | None = None) -> Any: ...

    def shutdown(self) -> None: ...


class Frontend(Protocol):
    """vLLM's OpenAI serving layer: request bodies in, vLLM's own replies out."""

    async def chat(self, body: dict[str, Any]) -> Reply: ...

    async def completion(self, body: dict[str, Any]) -> Reply: ...

    def engine_request_id(self, endpoint: Endpoint, request_id: str) -> str:
        """The id the engine knows a request by (what ``abort`` takes)."""
        ...


@dataclass(frozen=True)
class Runtime:
    """A started engine and the serving layer on top of it."""

    engine: EngineClient
    frontend: Frontend
    max_model_len: int
    max_num_seqs: int | None = None
    kv_tokens: int | None = None
    """KV-cache capacity in tokens (blocks x block size), once the engine has sized it."""
    close: Callable[[], Awaitable[None]] | None = None
    """Shuts the engine down; without it, ``engine.shutdown()`` runs in a thread."""
    modalities: frozenset[str] | None = None
    """What the loaded model reads besides text (``image``, ``audio``, ``video``), as vLLM
    reports it; ``None``: not reported (the settings' ``modalities`` stand)."""


MODALITY_PARTS: dict[str, tuple[str, ...]] = {
    "image": ("image_url",),
    "audio": ("input_audio", "audio_url"),
    "video": ("video_url",),
}
"""The chat content part types vLLM's chat serving reads for each modality."""


def content_parts(modalities: Iterable[str]) -> frozenset[str]:
    """The content part types a model reading ``modalities`` (and text) is sent."""
    kinds = (kind for modality in modalities for kind in MODALITY_PARTS.get(modality, ()))
    return frozenset(("text", *kinds))


EngineFactory = Callable[["VLLMSettings", "StatsRecorder"], Awaitable[Runtime]]
"""Builds the runtime; the engine reports every step to ``StatsRecorder.record``."""


class StatsRecorder:
    """Live figures from vLLM's per-step ``SchedulerStats`` and ``IterationStats``.

    Read by attribute name (those classes are not a stable vLLM interface): running and
    waiting requests and ``kv_cache_usage`` (0..1) from the last step; prefill tokens
    (``prompt_token_stats.computed``) and generated tokens summed over the last
    ``RATE_WINDOW_S`` seconds; prefix-cache queries and hits over ``PREFIX_WINDOW_S``.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.running = 0
        self.waiting = 0
        self.kv_usage: float | None = None
        self.prefix_hit_tokens = 0
        self._tokens: deque[tuple[float, int, int]] = deque()
        self._prefix: deque[tuple[float, int, int]] = deque()

    def record(self, scheduler_stats: Any | None, iteration_stats: Any | None) -> None:
        now = self._clock()
        if scheduler_stats is not None:
            self.running = int(getattr(scheduler_stats, "num_running_reqs", 0))
            self.waiting = int(getattr(scheduler_stats, "num_waiting_reqs", 0))
            self.kv_usage = float(getattr(scheduler_stats, "kv_cache_usage", 0.0))
            prefix = getattr(scheduler_stats, "prefix_cache_stats", None)
            if prefix is not None:
                if getattr(prefix, "reset", False):
                    self._prefix.clear()
                queries, hits = int(prefix.queries), int(prefix.hits)
                if queries:
                    self._prefix.append((now, queries, hits))
                    self.prefix_hit_tokens += hits
        if iteration_stats is not None:
            prompt = getattr(iteration_stats, "prompt_token_stats", None)
            prefill = int(prompt.computed) if prompt is not None else 0
            decode = int(getattr(iteration_stats, "num_generation_tokens", 0))
            if prefill or decode:
                self._tokens.append((now, prefill, decode))

    def snapshot(
        self, *, in_flight: int, slots_total: int | None, kv_tokens: int | None
    ) -> LiveStats:
        """Figures as of now; rates fall to zero once the engine has been idle a window."""
        now = self._clock()
        _expire(self._tokens, now - RATE_WINDOW_S)
        _expire(self._prefix, now - PREFIX_WINDOW_S)
        span = _span(self._tokens, now)
        prefill = sum(p for _, p, _ in self._tokens)
        decode = sum(d for _, _, d in self._tokens)
        queries = sum(q for _, q, _ in self._prefix)
        hits = sum(h for _, _, h in self._prefix)
        # no request of ours in flight: the last step's counts are stale (vLLM records only
        # while it steps), so report an idle engine
        running, waiting = (self.running, self.waiting) if in_flight else (0, 0)
        kv_used: int | None = None
        if self.kv_usage is not None and kv_tokens:
            kv_used = round(self.kv_usage * kv_tokens)
        return LiveStats(
            in_flight=in_flight,
            queue_depth=waiting,
            slots_busy=running,
            slots_total=slots_total,
            kv_used=kv_used if kv_tokens else None,
            kv_total=kv_tokens,
            prefill_tokens_per_s=prefill / span if span else 0.0,
            decode_tokens_per_s=decode / span if span else 0.0,
            prefix_hit_rate=hits / queries if queries else None,
            prefix_hit_tokens=self.prefix_hit_tokens,
        )


def _expire(window: deque[tuple[float, int, int]], oldest: float) -> None:
    while window and window[0][0] < oldest:
        window.popleft()


def _span(window: deque[tuple[float, int, int]], now: float) -> float:
    """Seconds the window's samples cover (at least one second, so a burst is not inflated)."""
    if not window:
        return 0.0
    return min(RATE_WINDOW_S, max(1.0, now - window[0][0]))


class Activity:
    """Requests of this deployment in progress, for draining and idle sleep."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.requests: dict[str, str] = {}
        """Our request id -> the engine's request id, for every request in progress."""
        self.last_active = clock()
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def in_flight(self) -> int:
        return len(self.requests)

    def begin(self, request_id: str, engine_request_id: str) -> None:
        self.requests[request_id] = engine_request_id
        self._idle.clear()

    def end(self, request_id: str) -> None:
        self.requests.pop(request_id, None)
        self.last_active = self._clock()
        if not self.requests:
            self._idle.set()

    def idle_for(self) -> float:
        """Seconds since the last request ended; 0 while any is in progress."""
        return 0.0 if self.requests else self._clock() - self.last_active

    async def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no request is in progress; False if ``timeout_s`` passed first."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        except TimeoutError:
            return False
        return True


class IdleSleeper:
    """Puts the engine to sleep (level 1: weights to CPU, KV freed) after an idle time and
    wakes it before the next request. Needs ``enable_sleep_mode`` (CUDA only)."""

    def __init__(self, engine: EngineClient, activity: Activity, idle_s: float) -> None:
        self._engine = engine
        self._activity = activity
        self._idle_s = idle_s
        self._lock = asyncio.Lock()
        self.sleeping = False
        self.sleeps = 0

    async def ensure_awake(self) -> None:
        """Call after ``Activity.begin``: waits out a sleep in progress, then wakes."""
        if not self.sleeping and not self._lock.locked():
            return
        async with self._lock:
            if self.sleeping:
                await self._engine.wake_up(None)
                self.sleeping = False

    async def run(self, poll_s: float | None = None) -> None:
        """Watch for idleness until cancelled; stop for good if the engine cannot sleep."""
        poll = poll_s if poll_s is not None else min(1.0, self._idle_s / 4)
        while True:
            await asyncio.sleep(poll)
            if self.sleeping or self._activity.idle_for() < self._idle_s:
                continue
            async with self._lock:
                if not self.sleeping and self._activity.idle_for() >= self._idle_s:
                    try:
                        await self._engine.sleep(1)
                    except Exception:
                        log.warning("the engine cannot sleep; idle sleep is off", exc_info=True)
                        return
                    self.sleeping = True
                    self.sleeps += 1
