"""Runs llama.cpp generation off the event loop, one ``Llama`` object per thread.

Each slot owns one ``llama_cpp.Llama`` (the weights are memory-mapped, so slots share them)
and one worker thread; a ``Llama`` is never touched by two threads. A request waits for a
free slot in a bounded queue, streams token text back to the event loop, and is stopped at
the next token once its consumer goes away.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from backends.base import LiveStats
from backends.llamacpp_text import TextAssembler
from gateway.errors import GatewayError, ServiceUnavailableError


@dataclass(frozen=True)
class Sampling:
    """Per-request sampling settings, in llama.cpp's terms."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repeat_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    seed: int | None = None


@dataclass
class GenerationJob:
    """One request's work: prompt tokens in, text pieces and a :class:`Finished` out."""

    prompt_tokens: list[int]
    max_tokens: int
    sampling: Sampling
    stops: list[str] = field(default_factory=list)
    grammar: Any = None  # a llama_cpp.LlamaGrammar, built on the event loop so errors are 400s
    cancelled: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True)
class Finished:
    reason: str  # "stop", "length" or "cancelled"
    prompt_tokens: int
    completion_tokens: int
    first_token_s: float | None


Event = str | Finished


class _Slot:
    def __init__(self, index: int, llama: Any) -> None:
        self.index = index
        self.llama = llama
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"llamacpp-{index}")


class LlamaEngine:
    """A pool of slots with a bounded wait queue; see the module docstring."""

    def __init__(self, loader: Callable[[int], Any], parallel: int, max_queue: int) -> None:
        self._loader = loader
        self._parallel = parallel
        self._max_queue = max_queue
        self._slots: list[_Slot] = []
        self._free: asyncio.Queue[_Slot] = asyncio.Queue()
        self._waiting = 0
        self._running = 0
        self._decode_rate = _Rate()

    async def start(self) -> None:
        for index in range(self._parallel):
            llama = await asyncio.to_thread(self._loader, index)
            slot = _Slot(index, llama)
            self._slots.append(slot)
            self._free.put_nowait(slot)

    @property
    def first(self) -> Any:
        """A loaded ``Llama``, for read-only facts (metadata, tokenizer) on the event loop."""
        return self._slots[0].llama

    def stats(self) -> LiveStats:
        return LiveStats(
            in_flight=self._running + self._waiting,
            queue_depth=self._waiting,
            slots_busy=self._running,
            slots_total=len(self._slots),
            decode_tokens_per_s=self._decode_rate.per_second(),
        )

    async def run(self, job: GenerationJob) -> AsyncIterator[Event]:
        """Yield text pieces, then one :class:`Finished`. Closing the iterator cancels."""
        slot = await self._acquire()
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[Event | BaseException] = asyncio.Queue()

        def emit(item: Event | BaseException) -> None:
            loop.call_soon_threadsafe(events.put_nowait, item)

        self._running += 1
        future = loop.run_in_executor(slot.executor, _generate, slot.llama, job, emit)
        # the slot goes back only when its thread is done with the Llama object
        future.add_done_callback(lambda _: self._release(slot))
        try:
            while True:
                item = await events.get()
                if isinstance(item, BaseException):
                    raise _map_errors(item)
                yield item
                if isinstance(item, Finished):
                    self._decode_rate.add(item.completion_tokens)
                    return
        finally:
            job.cancelled.set()

    async def _acquire(self) -> _Slot:
        if self._free.empty() and self._waiting >= self._max_queue:
            raise ServiceUnavailableError(
                f"all {len(self._slots)} slots are busy and {self._waiting} requests are queued",
                retry_after=1.0,
            )
        self._waiting += 1
        try:
            return await self._free.get()
        finally:
            self._waiting -= 1

    def _release(self, slot: _Slot) -> None:
        self._running -= 1
        self._free.put_nowait(slot)

    async def aclose(self) -> None:
        for slot in self._slots:
            slot.executor.shutdown(wait=True, cancel_futures=True)
            with contextlib.suppress(Exception):
                slot.llama.close()
        self._slots.clear()


def _map_errors(exc: BaseException) -> GatewayError:
    if isinstance(exc, GatewayError):
        return exc
    return GatewayError(f"llama.cpp failed: {type(exc).__name__}: {exc}")


def _generate(
    llama: Any, job: GenerationJob, emit: Callable[[Event | BaseException], None]
) -> None:
    """Worker-thread body: generate until EOS, a stop string, max_tokens or cancellation."""
    try:
        emit(_generate_tokens(llama, job, emit))
    except Exception as exc:
        emit(exc)


def _generate_tokens(
    llama: Any, job: GenerationJob, emit: Callable[[Event | BaseException], None]
) -> Finished:
    import llama_cpp

    vocab = llama._model.vocab
    started = time.perf_counter()
    first_token_s: float | None = None
    if job.sampling.seed is not None:
        llama.set_seed(job.sampling.seed)
    text = TextAssembler(job.stops)
    count, reason = 0, "length"
    tokens = llama.generate(
        job.prompt_tokens,
        temp=job.sampling.temperature,
        top_p=job.sampling.top_p,
        top_k=job.sampling.top_k,
        min_p=job.sampling.min_p,
        repeat_penalty=job.sampling.repeat_penalty,
        frequency_penalty=job.sampling.frequency_penalty,
        presence_penalty=job.sampling.presence_penalty,
        grammar=job.grammar,
    )
    try:
        for token in tokens:
            if job.cancelled.is_set():
                reason = "cancelled"
                break
            if llama_cpp.llama_vocab_is_eog(vocab, token):
                reason = "stop"
                break
            count += 1
            if first_token_s is None:
                first_token_s = time.perf_counter() - started
            piece = text.feed(llama.detokenize([token]))
            if piece:
                emit(piece)
            if text.stopped:
                reason = "stop"
                break
            if count >= job.max_tokens:
                break
    finally:
        tokens.close()
    tail = text.finish()
    if tail and reason != "cancelled":
        emit(tail)
    return Finished(reason, len(job.prompt_tokens), count, first_token_s)


class _Rate:
    """Tokens per second over a sliding 30 s window."""

    def __init__(self, window_s: float = 30.0) -> None:
        self._window_s = window_s
        self._samples: list[tuple[float, int]] = []

    def add(self, tokens: int) -> None:
        now = time.monotonic()
        self._samples.append((now, tokens))
        self._samples = [(t, n) for t, n in self._samples if now - t <= self._window_s]

    def per_second(self) -> float | None:
        if not self._samples:
            return None
        now = time.monotonic()
        total = sum(n for t, n in self._samples if now - t <= self._window_s)
        return total / self._window_s
