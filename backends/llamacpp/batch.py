"""Continuous batching over one llama.cpp context: the scheduler thread.

One context holds ``parallel`` sequences, each in its own KV stream (``kv_unified=False``, so
a sequence's attention never sees, and its output never depends on, its batch neighbours).
One thread owns the context and loops:

1. drop cancelled sequences and admit waiting jobs into free sequences, reusing KV that a
   sequence kept from an earlier request (or copying a live neighbour's stream) when the
   new prompt shares its prefix (which sequence: ``placement.py``; what a sequence and its
   job hold: ``sequences.py``);
2. build one ``llama_batch``: the next token of every decoding sequence, then prompt chunks
   of prefilling sequences up to ``n_batch`` tokens in all (chunked prefill: a long prompt
   takes several steps and never stalls running decodes);
3. run one ``llama_decode``; sample every sequence that produced logits with its own sampler
   chain; finished sequences leave at once, keeping their KV as a prefix cache;
4. post the step's text pieces and :class:`Finished` events to the event loop in one call.

Between admission and the step it runs at most one call handed over with
:meth:`Scheduler.call` (reading or writing one sequence's KV state: ``kvstate.py``), so
running decodes keep moving while such calls queue. It sleeps on a condition while nothing
is running, waiting or called. It stamps ``progress_at``
after every decode and when it is handed work while asleep; ``watchdog.py`` turns a stale
stamp with work pending into a stall. A job it cannot place (no prompt tokens, a prompt that
fills the sequence, token ids outside the vocabulary) fails alone at admission, and a running
job that has nothing left to decode fails rather than keep the thread spinning. Everything
else (the wait queue bound, asyncio queues, tokenizing) lives on the event loop side, in
``engine.py``.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from backends.llamacpp.held import HeldChains
from backends.llamacpp.kvstate import SeqStates
from backends.llamacpp.placement import Placement, check_prompt
from backends.llamacpp.rates import Rates
from backends.llamacpp.sampling import Finished, TokenLogprob, token_logprob
from backends.llamacpp.sequences import Seq, Task, Ticket
from backends.llamacpp.settings import BatchSettings
from gateway.errors import GatewayError, ServiceUnavailableError

Done = Callable[[Any], None]
"""Where a result goes on the event loop: a job's events, a call's answer."""
Post = Callable[[list[tuple[Done, Any]]], None]
Call = tuple[Callable[[SeqStates], Any], Done]


def _nothing() -> None:
    pass


class Scheduler:
    """Owns the llama.cpp context and the thread that steps it; see the module docstring.

    Figures read by other threads (``busy``, ``kv_used``, ``steps``, ``progress_at``,
    counters) are plain attributes written only by the scheduler thread (``progress_at`` also
    by :meth:`submit` while the thread sleeps).
    """

    def __init__(self, model: Any, settings: BatchSettings, post: Post) -> None:
        import llama_cpp

        self._model = model
        self._post = post
        self._ctx = _new_context(model.pointer, settings)
        self._mem = llama_cpp.llama_get_memory(self._ctx)
        self.n_ctx = int(llama_cpp.llama_n_ctx(self._ctx))
        self.n_ctx_seq = int(llama_cpp.llama_n_ctx_seq(self._ctx))
        self._n_batch = int(llama_cpp.llama_n_batch(self._ctx))
        self._batch = llama_cpp.llama_batch_init(self._n_batch, 0, 1)
        self._seqs = [Seq(i) for i in range(settings.parallel)]
        self.held = HeldChains(settings.parallel)
        """The prefix links each sequence's KV holds (see ``held.py``)."""
        self._placement = Placement(
            self._seqs,
            self._mem,
            self.held,
            prefix_cache=settings.prefix_cache,
            n_ctx_seq=self.n_ctx_seq,
        )
        self.states = SeqStates(self._ctx, self._mem, self._seqs, self.held, self._placement)
        self._waiting: deque[Ticket] = deque()
        self._calls: deque[Call] = deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._asleep = False
        self._exited = self._orphaned = False
        self._then: Callable[[], None] = _nothing
        self._order = 0
        self._outbox: list[tuple[Done, Any]] = []
        self.rates = Rates()
        self.busy = 0
        self.kv_used = 0
        self.steps = 0
        self.prompt_tokens_total = 0
        self.prefix_hit_tokens = 0
        self.progress_at = time.monotonic()
        """When the thread last decoded, or was handed work while asleep (monotonic clock)."""
        # Every decode, the warm-up included, runs on this one thread. OpenMP (llama.cpp's
        # CPU backend) keeps a pool of worker threads per calling thread; a second caller
        # (the loading thread) adds a second pool, and once a process holds more OpenMP
        # threads than there are cores, they stop spinning between decodes and sleep
        # instead: about a third of the throughput lost on a quiet machine.
        self._warmed = threading.Event()
        self._warm_error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="llamacpp-batch", daemon=True)
        self._thread.start()
        self._warmed.wait()
        if self._warm_error is not None:
            self._thread.join()
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self._ctx)
            raise self._warm_error

    @property
    def parallel(self) -> int:
        return len(self._seqs)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def pending(self) -> bool:
        """Work is running or queued, or the thread died (then nothing will ever run)."""
        return bool(self.busy or self._waiting or self._calls) or not self._thread.is_alive()

    # event-loop side ------------------------------------------------------------------

    def submit(self, ticket: Ticket) -> None:
        with self._cond:
            if self._stopping:
                raise ServiceUnavailableError("the llama.cpp engine is shutting down")
            if self._asleep:  # an idle thread's old stamp must not count against new work
                self.progress_at = time.monotonic()
            self._waiting.append(ticket)
            self._cond.notify()

    def call(self, run: Callable[[SeqStates], Any], done: Done) -> None:
        """Run ``run`` on the scheduler thread between two steps; ``done`` gets its result
        or the exception it raised, on the event loop."""
        with self._cond:
            if self._stopping:
                raise ServiceUnavailableError("the llama.cpp engine is shutting down")
            if self._asleep:
                self.progress_at = time.monotonic()
            self._calls.append((run, done))
            self._cond.notify()

    def withdraw(self, ticket: Ticket) -> bool:
        """Take back a ticket that is still waiting (True: the caller owns its chain now)."""
        with self._cond:
            try:
                self._waiting.remove(ticket)
            except ValueError:
                return False
            return True

    def close(self, timeout_s: float | None = None, then: Callable[[], None] = _nothing) -> bool:
        """Stop the thread, fail what is left, free the context, then call ``then`` (the
        owner frees the model there).

        False when the thread is still inside a step after ``timeout_s`` (a stalled decode):
        the queue is failed now; the running jobs, the context and ``then`` are left to the
        thread, which does them once that step returns (freeing memory a decode is using
        would crash the process).
        """
        with self._cond:
            self._stopping = True
            self._cond.notify()
            waiting, self._waiting = self._waiting, deque()
            calls, self._calls = self._calls, deque()
            self._then = then
        for ticket in waiting:
            ticket.chain.free()
        failed: list[tuple[Done, Any]] = [(t.deliver, _shut_down()) for t in waiting]
        failed += [(done, _shut_down()) for _, done in calls]
        if failed:
            self._post(failed)
        self._thread.join(timeout_s)
        with self._cond:
            self._orphaned = not self._exited
        if self._orphaned:
            return False
        self._release_all()
        return True

    def _release_all(self) -> None:
        import llama_cpp

        for seq in self._seqs:
            if seq.task is not None:
                self._fail(seq, _shut_down())
        self._flush()
        llama_cpp.llama_batch_free(self._batch)
        llama_cpp.llama_free(self._ctx)
        self._then()

    # scheduler thread -----------------------------------------------------------------

    def _main(self) -> None:
        try:
            self._warm_up()
        except BaseException as exc:  # the constructor frees the context and raises it
            self._warm_error = exc
            return
        finally:
            self.progress_at = time.monotonic()
            self._warmed.set()
        try:
            self._run()
        finally:
            with self._cond:
                self._exited = True
                orphaned = self._orphaned
            if orphaned:  # close() gave up waiting for this thread: the cleanup is ours
                self._release_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not (self._stopping or self._waiting or self.busy or self._calls):
                    self._asleep = True
                    self._cond.wait()
                self._asleep = False
                if self._stopping:
                    return
                free = sum(1 for s in self._seqs if s.task is None)
                admitted = [self._waiting.popleft() for _ in range(min(free, self.waiting))]
                call = self._calls.popleft() if self._calls else None
            for ticket, seq in self._placement.match(admitted):
                try:
                    self._admit(ticket, seq)
                except Exception as exc:
                    ticket.chain.free()
                    self._outbox.append((ticket.deliver, _as_gateway_error(exc)))
            if call is not None:
                self._serve(*call)
            try:
                self._step()
            except Exception as exc:  # a bug or a llama.cpp failure: fail the running jobs
                error = _as_gateway_error(exc)
                for seq in self._seqs:
                    if seq.task is not None:
                        self._fail(seq, error)
            self._publish()
            self._flush()

    def _admit(self, ticket: Ticket, seq: Seq | None) -> None:
        job = ticket.job
        check_prompt(job.prompt_tokens, self._model.n_vocab, self.n_ctx_seq)
        own = self.held.owners(job.prefix_chain, job.prefix_shared) if job.prefix_chain else None
        seq, cached = self._placement.place(job.prompt_tokens, seq, own)
        self.held.fill(seq.id, job.prefix_chain, len(job.prompt_tokens))
        self._order += 1
        seq.task = Task(ticket, self._order, cached)
        self.busy += 1
        self.prompt_tokens_total += len(job.prompt_tokens)
        self.prefix_hit_tokens += cached

    def _serve(self, run: Callable[[SeqStates], Any], done: Done) -> None:
        try:
            result = run(self.states)
        except Exception as exc:
            result = _as_gateway_error(exc)
        self.progress_at = time.monotonic()
        self._outbox.append((done, result))

    def _drop_dead(self) -> None:
        """Cancelled jobs leave their sequences; so does a job with nothing to decode."""
        for seq in self._seqs:
            task = seq.task
            if task is None:
                continue
            if task.ticket.job.cancelled.is_set():
                self._finish(seq, "cancelled")
            elif task.next_token is None and len(seq.tokens) >= len(task.prompt):
                # nothing sampled and no prompt left: it would hold the sequence forever
                self._fail(seq, GatewayError("llama.cpp job had nothing left to decode"))

    def _step(self) -> None:
        import llama_cpp

        self._drop_dead()
        running = [s for s in self._seqs if s.task is not None]
        if not running:
            return
        n, outputs = 0, []
        for seq in running:
            task = seq.task
            assert task is not None
            if task.next_token is not None:
                self._put(n, task.next_token, len(seq.tokens), seq.id, True)
                seq.tokens.append(task.next_token)
                task.next_token, task.out = None, n
                outputs.append(seq)
                n += 1
        decoded = n
        for seq in sorted(running, key=lambda s: s.task.order if s.task else 0):
            task = seq.task
            assert task is not None
            start = len(seq.tokens)
            if start >= len(task.prompt) or n >= self._n_batch:
                continue
            chunk = task.prompt[start : start + self._n_batch - n]
            done = start + len(chunk) == len(task.prompt)
            for offset, token in enumerate(chunk):
                last = done and offset == len(chunk) - 1
                self._put(n, token, start + offset, seq.id, last)
                n += 1
            seq.tokens.extend(chunk)
            if done:
                task.out = n - 1
                outputs.append(seq)
        if n == 0:
            return
        self._batch.n_tokens = n
        started = time.perf_counter()
        code = llama_cpp.llama_decode(self._ctx, self._batch)
        if code != 0:
            error = GatewayError(f"llama.cpp decode failed (code {code})")
            for seq in running:
                self._fail(seq, error)
            return
        self.progress_at = time.monotonic()
        self.rates.add(n - decoded, decoded, time.perf_counter() - started)
        for seq in outputs:
            self._sample(seq)

    def _warm_up(self) -> None:
        """Decode one token and forget it, so the first request does not pay for paging in
        the weights (or building GPU kernels): that first step could outlast the watchdog."""
        import llama_cpp

        token = self._model.bos if self._model.bos >= 0 else 0
        self._put(0, token, 0, 0, True)
        self._batch.n_tokens = 1
        code = llama_cpp.llama_decode(self._ctx, self._batch)
        llama_cpp.llama_memory_seq_rm(self._mem, 0, -1, -1)
        if code != 0:
            raise RuntimeError(f"llama.cpp could not decode a first token (code {code})")

    def _put(self, i: int, token: int, pos: int, seq_id: int, logits: bool) -> None:
        batch = self._batch
        batch.token[i] = token
        batch.pos[i] = pos
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = seq_id
        batch.logits[i] = logits

    def _sample(self, seq: Seq) -> None:
        task = seq.task
        assert task is not None
        token = task.ticket.chain.sample(self._ctx, task.out)
        if task.first_token_s is None:
            task.first_token_s = time.perf_counter() - task.ticket.submitted
        if self._model.is_eog(token):
            self._finish(seq, "stop")
            return
        top = task.ticket.job.top_logprobs
        if top is not None:
            self._outbox.append((task.ticket.deliver, self._logprob(task.out, token, top)))
        task.count += 1
        task.ticket.job.generated.append(token)
        visible = token in task.ticket.job.visible_tokens
        piece = task.text.feed(self._model.token_to_piece(token, visible))
        if piece:
            self._emit(task, piece)
        if task.text.stopped:
            self._finish(seq, "stop")
        elif task.count >= task.ticket.job.max_tokens or len(seq.tokens) >= self.n_ctx_seq:
            self._finish(seq, "length")  # (or the token would not fit the sequence's KV)
        else:
            task.next_token = token

    def _logprob(self, index: int, token: int, top: int) -> TokenLogprob:
        import llama_cpp
        import numpy as np

        pointer = llama_cpp.llama_get_logits_ith(self._ctx, index)
        row = np.ctypeslib.as_array(pointer, shape=(self._model.n_vocab,))
        return token_logprob(row, token, top, self._model.token_to_piece)

    def _finish(self, seq: Seq, reason: str) -> None:
        """The task leaves its sequence, which keeps its KV as a prefix cache."""
        task = self._release(seq)
        if reason != "cancelled":
            tail = task.text.finish()
            if tail:
                self._emit(task, tail)
            if task.held:
                self._outbox.append((task.ticket.deliver, "".join(task.held)))
        finished = Finished(
            reason, len(task.prompt), task.count, task.first_token_s, cached_tokens=task.cached
        )
        self._outbox.append((task.ticket.deliver, finished))

    def _emit(self, task: Task, piece: str) -> None:
        if task.held is None:
            self._outbox.append((task.ticket.deliver, piece))
        else:
            task.held.append(piece)  # a whole answer: one event at the end, not one per token

    def _fail(self, seq: Seq, error: BaseException) -> None:
        task = self._release(seq)
        self._placement.trim(seq, 0)  # its KV may be half-written
        self._outbox.append((task.ticket.deliver, error))

    def _release(self, seq: Seq) -> Task:
        task = seq.task
        assert task is not None
        seq.task = None
        task.ticket.chain.free()
        self.busy -= 1
        return task

    def _publish(self) -> None:
        self.kv_used = sum(len(s.tokens) for s in self._seqs if s.task is not None)
        self.steps += 1

    def _flush(self) -> None:
        if self._outbox:
            items, self._outbox = self._outbox, []
            self._post(items)


def _new_context(model: Any, settings: BatchSettings) -> Any:
    import llama_cpp

    kv_types = {"f16": llama_cpp.GGML_TYPE_F16, "q8_0": llama_cpp.GGML_TYPE_Q8_0}
    params = llama_cpp.llama_context_default_params()
    params.n_ctx = settings.parallel * settings.n_ctx_per_slot
    params.n_batch = max(settings.n_batch, settings.parallel)
    params.n_ubatch = min(params.n_batch, 512)
    params.n_seq_max = settings.parallel
    params.n_threads = settings.threads
    params.n_threads_batch = settings.threads
    params.type_k = kv_types[settings.kv_cache_type]
    params.type_v = kv_types[settings.kv_cache_type]
    params.flash_attn_type = {
        True: llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
        False: llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED,
        "auto": llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO,
    }[settings.flash_attn]
    params.kv_unified = False
    params.no_perf = True
    ctx = llama_cpp.llama_init_from_model(model, params)
    if not ctx:
        hint = "" if settings.kv_cache_type == "f16" else (
            "; a q8_0 KV cache needs flash attention and head sizes divisible by 32"
        )  # fmt: skip
        raise RuntimeError(
            f"llama.cpp could not create a context ({settings.parallel} sequences x "
            f"{settings.n_ctx_per_slot} tokens, KV {settings.kv_cache_type}){hint}"
        )
    return ctx


def _shut_down() -> ServiceUnavailableError:
    return ServiceUnavailableError("the llama.cpp engine shut down", retry_after=1.0)


def _as_gateway_error(exc: BaseException) -> GatewayError:
    if isinstance(exc, GatewayError):
        return exc
    return GatewayError(f"llama.cpp failed: {type(exc).__name__}: {exc}")
