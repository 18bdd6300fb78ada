"""The event-loop face of the batched llama.cpp engine.

:class:`LlamaEngine` loads a GGUF once (:class:`LoadedModel`: weights, vocabulary, metadata)
and hands jobs to the :class:`~backends.llamacpp.batch.Scheduler` thread, which runs them
all in one context. Here live the parts that belong to the event loop: the bounded wait
queue (back-pressure), per-request event queues, sampler-chain compilation (so a bad
grammar is a 400 before anything streams), tokenizing, and the live figures.

Closing the iterator returned by :meth:`LlamaEngine.run` (or cancelling the task awaiting
it) cancels the job: a waiting job is withdrawn at once, a running one leaves its sequence at
the scheduler's next step.

A sequence's KV state moves out and in through :meth:`LlamaEngine.export_kv` and
:meth:`LlamaEngine.import_kv`, run on the scheduler thread (``kvstate.py``); both wait for
the engine's fingerprint, the model file's hash computed in a thread after the load.

A watchdog (``watchdog.py``) looks at the scheduler from the event loop: when it has work and
has made no progress for ``stall_timeout_s``, the engine is *stalled*. Its jobs then fail with
503 ``engine_stalled``, new ones are refused the same way, and :meth:`LlamaEngine.stats` says
``stalled`` (readiness turns 503) until the thread moves again.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import time
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import Any

import structlog

from backends.base import LiveStats
from backends.kv import KvFingerprint, KvHeader
from backends.llamacpp.batch import Done, Scheduler
from backends.llamacpp.kvstate import (
    Buffer,
    SeqStates,
    model_fingerprint,
    model_shape,
    state_bound,
)
from backends.llamacpp.sampling import Event, Finished, GenerationJob, Sampling, build_chain
from backends.llamacpp.sequences import Ticket
from backends.llamacpp.settings import BatchSettings
from backends.llamacpp.watchdog import StallWatch, check_interval
from gateway.common.periodic import Periodic
from gateway.errors import ServiceUnavailableError

__all__ = ["Finished", "GenerationJob", "LlamaEngine", "LoadedModel", "Sampling"]

log = structlog.get_logger("shunter.llamacpp")

_QUIET: list[Any] = []  # keeps the no-op log callback alive while llama.cpp holds it


def quiet_llama_logs() -> None:
    """Send llama.cpp's and ggml's log lines nowhere (they go to stderr by default)."""
    import llama_cpp

    if not _QUIET:
        _QUIET.append(llama_cpp.llama_log_callback(lambda level, text, data: None))
    llama_cpp.llama_log_set(_QUIET[0], ctypes.c_void_p(0))


class LoadedModel:
    """A GGUF's weights and vocabulary, loaded through llama.cpp's C API.

    ``tokenize`` / ``detokenize`` may run on any thread (they read the vocabulary only);
    ``token_to_piece`` is the scheduler thread's, with a per-token cache.
    """

    def __init__(self, path: Path, gpu_layers: int = 0) -> None:
        import llama_cpp

        quiet_llama_logs()
        llama_cpp.llama_backend_init()
        params = llama_cpp.llama_model_default_params()
        params.n_gpu_layers = gpu_layers
        pointer = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        if not pointer:
            raise RuntimeError(f"llama.cpp could not load {path}")
        self.pointer = pointer
        self.vocab = llama_cpp.llama_model_get_vocab(pointer)
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(self.vocab))
        self.n_ctx_train = int(llama_cpp.llama_model_n_ctx_train(pointer))
        self.bos = int(llama_cpp.llama_vocab_bos(self.vocab))
        self.eos = int(llama_cpp.llama_vocab_eos(self.vocab))
        self.metadata = _metadata(pointer)
        self._pieces: dict[int, bytes] = {}

    def tokenize(self, text: bytes, *, add_bos: bool, special: bool) -> list[int]:
        import llama_cpp

        size = len(text) + 8
        while True:
            out = (llama_cpp.llama_token * size)()
            n = llama_cpp.llama_tokenize(self.vocab, text, len(text), out, size, add_bos, special)
            if n >= 0:
                return list(out[:n])
            size = -n

    def token_to_piece(self, token: int, special: bool = False) -> bytes:
        key = token if not special else -token - 1
        piece = self._pieces.get(key)
        if piece is None:
            piece = self._pieces[key] = _piece(self.vocab, token, special)
        return piece

    def detokenize(self, tokens: list[int], special: bool = False) -> bytes:
        return b"".join(_piece(self.vocab, t, special) for t in tokens)

    def is_eog(self, token: int) -> bool:
        import llama_cpp

        return bool(llama_cpp.llama_vocab_is_eog(self.vocab, token))

    def close(self) -> None:
        import llama_cpp

        if self.pointer is not None:
            llama_cpp.llama_model_free(self.pointer)
            self.pointer = None


class LlamaEngine:
    """One model, one batched context, a bounded wait queue; see the module docstring."""

    def __init__(
        self,
        model_path: Path,
        settings: BatchSettings,
        *,
        gpu_layers: int = 0,
        max_queue: int,
        stall_timeout_s: float | None = None,
        name: str = "llamacpp",
    ) -> None:
        self._path = model_path
        self._settings = settings
        self._gpu_layers = gpu_layers
        self._max_queue = max_queue
        self._name = name
        self._model: LoadedModel | None = None
        self._scheduler: Scheduler | None = None
        self._live: set[Ticket] = set()  # submitted, until their consumer lets go
        self._job_s = 1.0  # moving average of a job's time in the engine, for retry-after
        self._watch = StallWatch(stall_timeout_s) if stall_timeout_s is not None else None
        self._watcher: Periodic | None = None
        self._fingerprint: KvFingerprint | None = None
        self._hashing: asyncio.Task[KvFingerprint] | None = None
        self.state_bound = 0
        """The most bytes one sequence's KV state takes here (a full sequence)."""

    async def start(self) -> None:
        loop = asyncio.get_running_loop()

        def post(items: list[tuple[Done, Any]]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody listens
                loop.call_soon_threadsafe(_deliver_all, items)

        def load() -> tuple[LoadedModel, Scheduler]:
            model = LoadedModel(self._path, self._gpu_layers)
            try:
                return model, Scheduler(model, self._settings, post)
            except BaseException:
                model.close()
                raise

        model, scheduler = await asyncio.to_thread(load)
        self._model, self._scheduler = model, scheduler
        settings = self._settings
        self.state_bound = state_bound(model, scheduler.n_ctx_seq, settings.kv_cache_type)
        shape = model_shape(model, settings.kv_cache_type, settings.flash_attn, scheduler.parallel)
        self._hashing = asyncio.create_task(asyncio.to_thread(model_fingerprint, self._path, shape))
        self._hashing.add_done_callback(self._hashed)
        if self._watch is not None:
            self._watcher = Periodic(check_interval(self._watch.timeout_s), self._look)
            self._watcher.start()

    @property
    def model(self) -> LoadedModel:
        assert self._model is not None, "engine used before start()"
        return self._model

    @property
    def scheduler(self) -> Scheduler:
        assert self._scheduler is not None, "engine used before start()"
        return self._scheduler

    @property
    def n_ctx_per_slot(self) -> int:
        return self.scheduler.n_ctx_seq

    @property
    def kv_fingerprint(self) -> KvFingerprint | None:
        """What a KV state moved here must have been computed with; ``None`` until the
        model file is hashed."""
        return self._fingerprint

    def _hashed(self, task: asyncio.Task[KvFingerprint]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            log.warning("llamacpp_fingerprint_failed", deployment=self._name, error=str(error))
            return
        self._fingerprint = task.result()

    @property
    def stalled(self) -> bool:
        return self._watch is not None and self._watch.stalled

    def stats(self) -> LiveStats:
        scheduler = self._scheduler
        if scheduler is None:
            return LiveStats(slots_busy=0, slots_total=self._settings.parallel)
        prefill, decode = scheduler.rates.per_second()
        total = scheduler.prompt_tokens_total
        return LiveStats(
            in_flight=len(self._live),
            queue_depth=scheduler.waiting,
            slots_busy=scheduler.busy,
            slots_total=scheduler.parallel,
            kv_used=scheduler.kv_used,
            kv_total=scheduler.n_ctx,
            prefill_tokens_per_s=prefill,
            decode_tokens_per_s=decode,
            prefix_hit_rate=scheduler.prefix_hit_tokens / total if total else None,
            prefix_hit_tokens=scheduler.prefix_hit_tokens,
            stalled=self.stalled,
            queue_limit=self._max_queue,
            held_prefixes=scheduler.held.report(),
            kv_fingerprint=self._fingerprint.digest if self._fingerprint is not None else None,
            kv_bytes_per_token=self.state_bound / max(scheduler.n_ctx_seq, 1),
            held_sequences=scheduler.held.sequences(),
        )

    async def run(self, job: GenerationJob) -> AsyncGenerator[Event, None]:
        """Yield text pieces, then one :class:`Finished`. Closing the iterator cancels.

        The job is queued on the first ``anext``; a full queue raises
        :class:`ServiceUnavailableError` (503 with ``retry-after``) right there, and so does
        a stalled engine (code ``engine_stalled``).
        """
        scheduler = self.scheduler
        if self.stalled:
            raise self._stall_error()
        self._check_capacity(scheduler)
        model = self.model
        chain = build_chain(
            model.vocab, model.n_vocab, job.sampling, job.grammar, param=job.grammar_param
        )
        events: asyncio.Queue[Event | BaseException] = asyncio.Queue()
        ticket = Ticket(job, chain, events.put_nowait)
        try:
            scheduler.submit(ticket)
        except BaseException:
            chain.free()
            raise
        self._live.add(ticket)
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            while True:
                item = await events.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
                if isinstance(item, Finished):
                    self._job_s = 0.8 * self._job_s + 0.2 * (loop.time() - started)
                    return
        finally:
            self._live.discard(ticket)
            job.cancelled.set()
            if scheduler.withdraw(ticket):
                chain.free()

    async def export_kv(self, link: str) -> tuple[KvHeader, Buffer]:
        """The state of an idle sequence holding ``link`` (``kvstate.py``): its header and
        a ctypes buffer of ``header.n_bytes``."""
        fingerprint = self.ready_fingerprint()
        result: tuple[KvHeader, Buffer] = await self._call(
            lambda states: states.export(link, fingerprint, self._name)
        )
        return result

    async def import_kv(self, header: KvHeader, buffer: Buffer) -> int:
        """Write a state (checked: ``kvmove.py``) into a free sequence; its id."""
        result: int = await self._call(lambda states: states.load(header, buffer))
        return result

    def ready_fingerprint(self) -> KvFingerprint:
        """The fingerprint; 503 ``kv_not_ready`` while the model file is being hashed."""
        if self._fingerprint is None:
            raise ServiceUnavailableError(
                f"deployment {self._name!r} is still hashing its model file; retry shortly",
                code="kv_not_ready",
                retry_after=1.0,
            )
        return self._fingerprint

    async def _call(self, run: Callable[[SeqStates], Any]) -> Any:
        """``run(states)`` on the scheduler thread, between two steps."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def done(result: Any) -> None:
            if future.done():
                return
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)

        self.scheduler.call(run, done)
        return await future

    def _check_capacity(self, scheduler: Scheduler) -> None:
        if len(self._live) < scheduler.parallel + self._max_queue:
            return
        waiting = scheduler.waiting
        retry_after = min(30.0, max(1.0, self._job_s * (waiting + 1) / scheduler.parallel))
        raise ServiceUnavailableError(
            f"all {scheduler.parallel} sequences are busy and {waiting} requests are queued "
            f"(max_queue {self._max_queue}); retry later",
            retry_after=retry_after,
        )

    async def _look(self) -> None:
        """The watchdog's periodic look (see ``watchdog.py``)."""
        scheduler, watch = self._scheduler, self._watch
        if scheduler is None or watch is None:
            return
        now, progress_at = time.monotonic(), scheduler.progress_at
        changed = watch.observe(now, progress_at, scheduler.pending)
        if changed is None:
            return
        figures = {"busy": scheduler.busy, "queued": scheduler.waiting}
        if not changed:
            log.info("llamacpp_moving_again", deployment=self._name, **figures)
            return
        idle_s = round(now - progress_at, 3)
        log.warning("llamacpp_stalled", deployment=self._name, idle_s=idle_s, **figures)
        for ticket in list(self._live):
            ticket.job.cancelled.set()  # a running one leaves its sequence if the thread moves
            if scheduler.withdraw(ticket):
                ticket.chain.free()
            ticket.deliver(self._stall_error())

    def _stall_error(self) -> ServiceUnavailableError:
        assert self._watch is not None
        timeout_s = self._watch.timeout_s
        return ServiceUnavailableError(
            f"deployment {self._name!r}: the llama.cpp engine has made no progress for over "
            f"{timeout_s:g}s (stall_timeout_s); it takes no requests until it moves again",
            code="engine_stalled",
            retry_after=min(30.0, max(1.0, timeout_s)),
        )

    async def aclose(self) -> None:
        if self._hashing is not None:
            self._hashing.cancel()  # the thread reads the file to its end, alone
            self._hashing = None
        if self._watcher is not None:
            await self._watcher.stop()
            self._watcher = None
        scheduler, model = self._scheduler, self._model
        self._scheduler = self._model = None
        if scheduler is None or model is None:  # never started (both are set together)
            return
        timeout_s = self._watch.timeout_s if self._watch is not None else None
        if not await asyncio.to_thread(scheduler.close, timeout_s, model.close):
            # a stalled decode: its jobs fail now; the thread frees the rest when it returns
            log.warning("llamacpp_closed_while_stalled", deployment=self._name)
            for ticket in list(self._live):
                ticket.job.cancelled.set()
                ticket.deliver(ServiceUnavailableError("the llama.cpp engine shut down"))


def _deliver_all(items: list[tuple[Done, Any]]) -> None:
    for deliver, event in items:
        deliver(event)


def _piece(vocab: Any, token: int, special: bool) -> bytes:
    import llama_cpp

    size = 64
    while True:
        buffer = ctypes.create_string_buffer(size)
        n = llama_cpp.llama_token_to_piece(vocab, token, buffer, size, 0, special)
        if n >= 0:
            return buffer.raw[:n]
        size = -n


def _metadata(model: Any) -> dict[str, str]:
    import llama_cpp

    count = llama_cpp.llama_model_meta_count(model)
    keys = [_meta_string(llama_cpp.llama_model_meta_key_by_index, model, i) for i in range(count)]
    values = [
        _meta_string(llama_cpp.llama_model_meta_val_str_by_index, model, i) for i in range(count)
    ]
    return dict(zip(keys, values, strict=True))


def _meta_string(read: Any, model: Any, index: int) -> str:
    size = 256
    while True:
        buffer = ctypes.create_string_buffer(size)
        n = int(read(model, index, buffer, size))
        if n < size:
            return buffer.value.decode("utf-8", errors="replace")
        size = n + 1
