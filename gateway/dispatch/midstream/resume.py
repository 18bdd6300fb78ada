"""Streams that survive their upstream: an answer that fails mid-stream is continued on the
next candidate, and the client reads one uninterrupted stream.

Retries and fallback (:mod:`gateway.dispatch.failover.rules`) end once the first byte has gone
out. After it, when a stream fails (its connection cut, an error event, a stall past the
deployment's ``stall_s``, a ``total_s`` that ran out, an engine failure) and the route has
``resume`` on, the gateway reads back what the client was sent (the frames it kept a
reference to, parsed only now) and asks the next candidate whose breaker and limits allow
it for the rest:

* the original request with the delivered text as a trailing assistant message to be
  continued (``prefill``: ``continue_final_message`` as vLLM names it; llama.cpp appends
  the text to the rendered prompt without closing the turn; Anthropic continues a last
  assistant turn natively), with ``max_tokens`` reduced by what was already produced;
* where a deployment says it does not take prefill (``prefill: false``), or answered a
  prefill with a 400, the delivered text quoted in a user turn with an instruction to
  continue exactly from its end (``user_turn``); the repeat such an answer starts with is
  trimmed (:class:`~gateway.dispatch.splice.Overlap`). A 400 on a prefill is learned for
  an hour and is never the client's error;
* for text completions, the prompt followed by the delivered text.

A tool call under way is continued by prefill only: the next candidate writes the call
again after the delivered text, and the splice drops the id, name and arguments the client
already has (a continuation that departs from them ends the stream with the in-band
error). llama.cpp engines of one process continue from the very tokens an unfinished
answer was decoded as (:mod:`backends.llamacpp.continued`).

The continuation's chunks are rewritten into the first stream's (:class:`Splice`): same
``id``, ``created`` and ``model``, no second ``role``; its usage counts every prompt an
upstream was sent (the original one and each continuation's, by the upstreams' own counts
where they gave them) and every produced token once, each charged at its deployment's
price, and lists each resume (where, why, the continuation's own usage) under
``usage.resumed``. An SSE comment line (which SDKs ignore) marks the
resume point, the access log line says ``resumed`` and ``shunter_resumes_total`` counts
them. Only when no candidate can continue does the client get the in-band error frame.

Responses and Messages streams are chat chunks (:class:`~gateway.protocol.frames.Chunks`)
that their API's encoder turns into its events above the stream's survival: the chunk
stream goes on with the continuation's chunks in place of the failed ones, and the
encoder writes its events on unchanged.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog

from backends.base import Price, cost_usd
from gateway.admission.limits import DeploymentLimitedError
from gateway.dispatch.failover.attempts import Candidate, attempt_once, within
from gateway.dispatch.failover.rules import Admit, OpenedStream, cause_of
from gateway.dispatch.health.fleet import PrefillRefusals
from gateway.dispatch.health.live import Attempt
from gateway.dispatch.midstream.splice import (
    Chunk,
    Delivered,
    Form,
    Overlap,
    Splice,
    continuation,
    left_to_generate,
    read_chunks,
    read_frames,
)
from gateway.dispatch.midstream.stall import stall_guard
from gateway.errors import (
    ContextLengthExceededError,
    GatewayError,
    StalledError,
)
from gateway.protocol import (
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChoiceDelta,
    ChunkChoice,
    Completion,
    CompletionChoice,
    CompletionRequest,
    Usage,
)
from gateway.protocol.frames import Chunks, Framed, Stream
from gateway.telemetry.tracing import attempt_span

log = structlog.get_logger("shunter.dispatch")
Opened = tuple[Candidate, Form, Chunk, AsyncIterator[Chunk], Attempt]


@dataclass
class _Segment:
    """One deployment's part of a resumed answer, for its price: the tokens it delivered
    and the prompt it was sent (``None``: the original prompt, the first's)."""

    price: Price | None
    tokens: int
    prompt: int | None = None


class Resume:
    """The continuations of one streamed request; see the module docstring.

    ``sent`` is where the surviving stream keeps a reference to each frame it passes on
    (chat and completions; ``None`` for a stream of chunks, which keeps its own).
    """

    def __init__(
        self,
        refusals: PrefillRefusals,
        opened: OpenedStream,
        request: ChatCompletionRequest | CompletionRequest,
        admit: Admit | None,
        facts: dict[str, Any],
        chunks: Chunks | None,
        resumes: int,
    ) -> None:
        self._refusals = refusals
        self._opened = opened
        self._request = request
        self._admit = admit
        self._facts = facts
        self._chunks = chunks
        self._left = resumes
        self.sent: list[bytes] | None = None if chunks is not None else [opened.first]
        self._current = opened.candidate
        routing = opened.routing
        # candidates the request already left before its first byte are not asked again
        self._tried = {opened.candidate.settings.name, *(name for name, _ in routing.trail.left)}
        self._prompt = routing.request.prompt_tokens
        self._asked = 0  # the prompt the continuation under way was sent
        self._segments: list[_Segment] = []
        self._base_tokens = 0  # delivered tokens at the last resume
        self.records: list[dict[str, Any]] = []
        self.note = b""  # the SSE comment line that marks the last resume point
        chat = isinstance(request, ChatCompletionRequest)
        self._operation = "chat" if chat else "text_completion"  # as the first attempt's
        self._span_facts: dict[str, str | int] = {}

    @classmethod
    def begin(
        cls,
        resumes: int,
        refusals: PrefillRefusals,
        opened: OpenedStream,
        request: ChatCompletionRequest | CompletionRequest,
        admit: Admit | None,
        facts: dict[str, Any],
        chunks: Chunks | None,
        framed: bool,
    ) -> Resume | None:
        """The resumes (at most ``resumes``) of a stream just opened, or ``None`` when its
        route has them off (0), has no other candidate, or what it delivered cannot be read
        back (a pass-through of another API's events, a hosted tool loop). ``chunks``: the
        stream's source, when it is one of chat chunks; ``framed``: its frames are OpenAI
        chunks."""
        if resumes <= 0 or len(opened.routing.candidates) < 2 or (chunks is None and not framed):
            if chunks is not None:
                chunks.delivered = None  # nothing will read them back
            return None
        return cls(refusals, opened, request, admit, facts, chunks, resumes)

    # --- after a failure -----------------------------------------------------------------

    async def after(
        self, failure: Exception, stream: Stream[Any], attempt: Attempt
    ) -> tuple[Stream[Any], Attempt] | None:
        """The stream that continues the answer ``stream`` (tracked by ``attempt``) failed
        to finish, with its own attempt; ``None`` when nothing can (the caller then ends it
        with the in-band error)."""
        if isinstance(failure, GatewayError) and not failure.counts_as_failure:
            return None  # the request's own fault: another deployment would say the same
        if self._left <= 0:
            return None
        started = time.perf_counter()
        failed, cause = self._current, _cause(failure)
        delivered = self._delivered()
        await _aclose(stream)
        attempt.finish(None, failed=True)
        await failed.breaker.fail()
        produced = delivered.tokens - self._base_tokens
        asked = self._asked if self._segments else None
        self._segments.append(_Segment(failed.settings.price, produced, asked))
        self._base_tokens = delivered.tokens
        if delivered.prompt_tokens and len(self._segments) == 1:
            self._prompt = delivered.prompt_tokens  # the first upstream's own count
        why = delivered.unresumable(self._request)
        if why is not None:
            self._count(failed, cause, "unresumable")
            log.info("resume_skipped", deployment=failed.settings.name, reason=why)
            return None
        left = left_to_generate(self._request, delivered)
        if left is not None and left <= 0:
            at_limit = self._at_limit(delivered)
            self._asked = 0  # nothing more is asked of anyone
            return self._spliced(failed, cause, "text", delivered, at_limit), attempt
        self._span_facts = {
            "shunter.resume.after": failed.settings.name,
            "shunter.resume.cause": cause,
            "shunter.resume.after_tokens": delivered.tokens,
        }
        opened = await self._open(delivered)
        if opened is None:
            self._count(failed, cause, "failed")
            return None
        candidate, form, first, rest, tracked = opened
        self._asked = self._prompt + delivered.tokens  # until it reports its own count
        self._left -= 1
        self._current = candidate
        stream = self._spliced(failed, cause, form, delivered, (first, rest))
        self._facts["resume_ms"] = round((time.perf_counter() - started) * 1000, 2)
        return stream, tracked

    def cost(self, usage: Usage | None) -> float | None:
        """What the whole answer costs: each deployment's prompt and the tokens it
        delivered at its price; ``None`` when the stream was never resumed."""
        if not self.records or usage is None:
            return None
        return sum(
            cost_usd(s.price, self._prompt if s.prompt is None else s.prompt, s.tokens)
            for s in self._segments
        )

    def _delivered(self) -> Delivered:
        if self._chunks is not None:
            return read_chunks(self._chunks.delivered or ())
        return read_frames(self.sent or ())

    def _count(self, failed: Candidate, cause: str, outcome: str) -> None:
        tally = self._facts.setdefault("resumes", [])
        tally.append((failed.settings.name, cause, outcome))

    # --- the next candidate ----------------------------------------------------------------

    async def _open(self, delivered: Delivered) -> Opened | None:
        """The first other candidate that starts a continuation, with its first chunk."""
        for candidate in self._opened.routing.candidates:
            name = candidate.settings.name
            if name in self._tried or not self._serves(candidate):
                continue
            self._tried.add(name)
            if not await candidate.breaker.admit():
                continue
            if self._admit is not None:
                try:
                    await self._admit(candidate)
                except DeploymentLimitedError:
                    candidate.breaker.record_abandoned()
                    continue
            opened = await self._try(candidate, delivered)
            if opened is not None:
                return opened
        return None

    async def _try(self, candidate: Candidate, delivered: Delivered) -> Opened | None:
        """A continuation on ``candidate``, in the first form it accepts."""
        routing = self._opened.routing
        book = self._refusals
        name = candidate.settings.name
        refused = False
        for form in self._forms(candidate, delivered):
            request = continuation(self._request, delivered, form)

            def start(chosen: Candidate, body: Any = request) -> Awaitable[tuple[Chunk, Any]]:
                return self._first(chosen, body)

            try:
                with attempt_span(self._operation, candidate.settings, 0) as span:
                    annotate = getattr(span, "set_attributes", None)
                    if annotate is not None:  # spans recorded: this one continues another's
                        annotate(self._span_facts)
                    (first, rest), tracked = await attempt_once(candidate, start, routing.request)
            except GatewayError as exc:
                log.warning("resume_attempt_failed", deployment=name, form=form, error=exc.message)
                refused = form == "prefill" and _refuses_prefill(exc)
                if refused:
                    continue
                return None
            if refused:
                book.refused(name)  # the user turn worked where the prefill was refused
            return candidate, form, first, rest, tracked
        if refused:
            book.refused(name)
        return None

    def _serves(self, candidate: Candidate) -> bool:
        capabilities = candidate.backend.capabilities
        if isinstance(self._request, CompletionRequest):
            return capabilities.completions
        return capabilities.chat

    def _forms(self, candidate: Candidate, delivered: Delivered) -> list[Form]:
        """The forms to ask ``candidate`` in, best first (none: it cannot continue)."""
        if isinstance(self._request, CompletionRequest):
            return ["text"]
        name = candidate.settings.name
        prefill = candidate.backend.capabilities.prefill and self._refusals.prefill(name)
        if delivered.calls:  # a tool call is only written again from where the text ends
            return ["prefill"] if prefill else []
        return ["prefill", "user_turn"] if prefill else ["user_turn"]

    async def _first(self, candidate: Candidate, request: Any) -> tuple[Chunk, Any]:
        backend = candidate.backend
        source: AsyncIterator[Chunk]
        if isinstance(request, CompletionRequest):
            source = backend.completion_stream(request)
        else:
            source = backend.chat_stream(request)
        try:
            limit = candidate.settings.timeouts.first_token_s
            first: Chunk = await within(limit, anext(source), backend, StalledError)
        except BaseException:
            await _aclose(source)
            raise
        return first, source

    # --- the spliced stream -----------------------------------------------------------------

    def _spliced(
        self,
        failed: Candidate,
        cause: str,
        form: Form,
        delivered: Delivered,
        chunks: tuple[Chunk, AsyncIterator[Chunk]],
    ) -> Stream[Any]:
        candidate = self._current
        name = candidate.settings.name
        record = {
            "deployment": failed.settings.name,
            "cause": cause,
            "resumed_on": name,
            "form": form,
            "after_tokens": delivered.tokens,
        }
        self.records.append(record)
        self._count(failed, cause, "resumed")
        self._facts["resumed"] = "; ".join(
            f"{r['resumed_on']} after {r['deployment']}: {r['cause']}" for r in self.records
        )
        self.note = f": resumed on {name} after {failed.settings.name}: {cause}\n\n".encode()
        log.info("stream_resumed", **record)
        total_s = candidate.settings.timeouts.total_s
        deadline = None if total_s is None else asyncio.get_running_loop().time() + total_s
        trim = Overlap(delivered.text) if form == "user_turn" else None
        close = self._closer(record, form, delivered)
        splice = Splice(delivered, close, trim, deadline, name)
        spliced = splice.chunks(*chunks)
        stream: Stream[Any]
        if self._chunks is not None:
            self._chunks.resume_with(spliced)  # type: ignore[arg-type]
            stream = self._chunks
        else:
            stream = Framed(spliced)
        return stall_guard(stream, candidate)

    def _closer(
        self, record: dict[str, Any], form: Form, delivered: Delivered
    ) -> Callable[[Usage | None, int], Usage]:
        def close(own: Usage | None, tokens: int) -> Usage:
            completion = own.completion_tokens if own is not None else tokens
            prompt = own.prompt_tokens if own is not None else None
            record.update(prompt_tokens=prompt, completion_tokens=completion)
            if (
                prompt
                and form == "prefill"
                and len(self.records) == 1
                and not delivered.prompt_tokens
            ):
                # the continuation's prompt is the original one plus the delivered text,
                # counted by the deployment's own tokenizer: better than an estimate
                self._prompt = max(1, prompt - delivered.tokens)
            asked = self._asked if prompt is None else prompt
            self._segments.append(_Segment(self._current.settings.price, completion, asked))
            total = delivered.tokens + completion
            prompts = self._prompt + sum(s.prompt or 0 for s in self._segments)
            return Usage.model_validate(
                {
                    "prompt_tokens": prompts,
                    "completion_tokens": total,
                    "total_tokens": prompts + total,
                    "resumed": [dict(r) for r in self.records],
                }
            )

        return close

    def _at_limit(self, delivered: Delivered) -> tuple[Chunk, AsyncIterator[Chunk]]:
        """The client's ``max_tokens`` was reached as the stream failed: it ends there."""
        fields: dict[str, Any] = {"id": delivered.id or "", "created": delivered.created or 0}
        fields["model"] = delivered.model or self._request.model
        last: Chunk
        if isinstance(self._request, CompletionRequest):
            choice = CompletionChoice(text="", finish_reason="length")
            last = Completion(**fields, choices=[choice])
        else:
            last = ChatCompletionChunk(
                **fields, choices=[ChunkChoice(delta=ChoiceDelta(), finish_reason="length")]
            )
        return last, _nothing()


def _cause(failure: Exception) -> str:
    return cause_of(failure) if isinstance(failure, GatewayError) else "error"


def _refuses_prefill(exc: GatewayError) -> bool:
    """A 400 (or 422) to a prefill: the deployment takes no trailing assistant message."""
    if isinstance(exc, ContextLengthExceededError) or exc.counts_as_failure:
        return False
    return exc.status_code in (400, 422) or exc.upstream_status in (400, 422)


async def _nothing() -> AsyncIterator[Chunk]:
    return
    yield  # an async generator with nothing in it


async def _aclose(iterator: Any) -> None:
    close = getattr(iterator, "aclose", None)
    if close is not None:
        await close()
