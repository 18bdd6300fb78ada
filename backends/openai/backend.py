"""OpenAI and every OpenAI-compatible server (Together, Groq, OpenRouter, remote vLLM, ...).

Requests go out as the client sent them: tools, ``response_format``, logprobs and unknown
fields pass through unchanged; only ``model`` is replaced by the deployment's upstream
model. Answers come back under the public model name the client asked for (whole, streamed
and passed through). Streams always ask the upstream for usage; an upstream that sends none
gets its usage counted here (about 4 characters per token, see
:func:`estimate_tokens`).

A stream is whole once a chunk carried a ``finish_reason`` (or usage): a body that ends
there without ``data: [DONE]`` is a complete answer, and the usage-only chunk that closes
every stream ends it at once (the sentinel is not waited for). Only a body that ends
before any ``finish_reason`` is a cut stream.

Two stream paths:

* :meth:`OpenAICompatBackend.chat_stream` parses every chunk into
  :class:`ChatCompletionChunk` (the :class:`~backends.base.Backend` contract);
* :meth:`OpenAICompatBackend.chat_stream_raw` passes the upstream's frames through as
  bytes, peeking only for errors and the usage chunk
  (:class:`~backends.openai.frames.RawChatStream`). It is
  cheaper: nothing in a chunk is checked, and only ``model`` is rewritten, by a byte
  replacement when the upstream's name differs from the public one.
"""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from contextlib import aclosing
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ValidationError

from backends.base import Capabilities, LiveStats
from backends.http.backend import HTTPBackend
from backends.http.errors import (
    annotate,
    cut_error,
    error_for_status,
    protocol_error,
)
from backends.http.jsonbody import encode_json, load_json
from backends.http.settings import read_api_key
from backends.http.sse import block_of, data_events, data_frame, frame_start, frames_of, last_frame
from backends.kv import KvHeader, KvImported
from backends.openai.frames import RawChatStream, finishes, usage_only
from backends.openai.settings import OpenAICompatSettings
from gateway.common.periodic import Periodic
from gateway.errors import GatewayError, UpstreamError
from gateway.protocol import (
    AssistantMessage,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChoiceDelta,
    Completion,
    CompletionRequest,
    EmbeddingRequest,
    EmbeddingResponse,
    Usage,
    jsonio,
    new_id,
    now,
)

if TYPE_CHECKING:
    import httpx

    from backends.openai.kvwire import KvWire

__all__ = ["OpenAICompatBackend", "OpenAICompatSettings"]

_M = TypeVar("_M", bound=BaseModel)
_C = TypeVar("_C", ChatCompletionChunk, Completion)
# after the usage-only chunk, how long [DONE] and the body's end may take to arrive (to
# keep the connection) before the answer goes out without them
_TAIL_S = 0.1
# a body that ends without [DONE] is whole if one of its last frames finished the answer
# (the finish chunk, then at most the usage chunk; a few more for n > 1 choices)
_TAIL_FRAMES = 4


class OpenAICompatBackend(HTTPBackend[OpenAICompatSettings]):
    """A :class:`~backends.base.Backend` over one pooled HTTP/1.1 client."""

    health_path = "models"

    def __init__(
        self,
        settings: OpenAICompatSettings,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(settings, transport=transport)
        self._remote: LiveStats | None = None
        self._local_stats: LiveStats | None = None
        self._poller = Periodic(1.0, self._poll_worker)
        self._public_names: dict[str, bytes] = {}  # each as a JSON string, for the raw path
        self._kv: KvWire | None = None  # a worker's KV endpoints
        self._budget_field = settings.output_budget_field()  # the settings are frozen

    @functools.cached_property
    def capabilities(self) -> Capabilities:
        """Built once: the settings are frozen, and routing reads this per request."""
        s = self._settings
        return Capabilities(
            chat=s.chat,
            completions=s.completions,
            embeddings=s.embeddings,
            tools=s.tools,
            json_schema=s.json_schema,
            images=s.images,
            context_length=s.context_length,
            prefill=s.prefill,
            chat_stream_raw=True,
            messages_drop=frozenset(s.messages_drop),
            clamp_output=s.clamp_output,
            kv_move=s.worker_stats,
        )

    def login_headers(self, key: str | None) -> dict[str, str]:
        return {"authorization": f"Bearer {key}"} if key else {}

    async def start(self) -> None:
        """Read the API key and open the connection pool; a worker's figures are polled."""
        if self._upstream is not None:
            return
        await super().start()
        if self._settings.worker_stats:
            from backends.openai.kvwire import KvWire  # with httpx: for workers only

            login = self.login_headers(read_api_key(self._settings.api_key_env))
            self._kv = KvWire(self._settings, login, self._transport)
            await self._poll_worker()
            self._poller.start()

    async def aclose(self) -> None:
        """Close the pool; streams still open are cut."""
        await self._poller.stop()
        kv, self._kv = self._kv, None
        if kv is not None:
            await kv.aclose()
        await super().aclose()

    async def export_kv(self, link: str) -> tuple[KvHeader, AsyncIterator[bytes]]:
        """A worker's sequence state, streamed from ``GET worker/kv/{link}``."""
        return await self._worker_kv().export(link)

    async def import_kv(self, header: KvHeader, chunks: AsyncIterator[bytes]) -> KvImported:
        """A state streamed to the worker's ``PUT worker/kv``."""
        return await self._worker_kv().load(header, chunks)

    def _worker_kv(self) -> KvWire:
        if self._kv is None:
            raise self.not_supported("KV moves (worker_stats is off, or not started)")
        return self._kv

    def stats(self) -> LiveStats:
        if self._remote is None:
            # the same object while nothing changed: routing reads it per candidate per
            # request and keeps what it derived from it while it is equal
            idle = self._local_stats
            if idle is None or idle.in_flight != self._in_flight:
                idle = self._local_stats = LiveStats(in_flight=self._in_flight)
            return idle
        return replace(self._remote, in_flight=max(self._in_flight, self._remote.in_flight))

    async def _poll_worker(self) -> None:
        """A worker's sequences, KV cells, queue and rates, summed over its deployments;
        an unreachable worker keeps its last figures (the breaker deals with failures)."""
        if self._upstream is None:
            return
        try:
            stats = await self._upstream.get_json("worker/stats", 2.0)
            deployments = stats["deployments"].values()
        except (GatewayError, KeyError, TypeError, AttributeError):
            return
        self._remote = _sum_stats([LiveStats(**d) for d in deployments])

    # --- whole responses ---------------------------------------------------------------

    async def chat(self, request: ChatCompletionRequest) -> ChatCompletion:
        """One chat completion; usage is counted here if the upstream sends none."""
        content = await self._post("chat/completions", self._to_wire(request, stream=False))
        result = self._from_wire(ChatCompletion, content)
        result.model = request.model
        if result.usage is None:
            chars = sum(_message_chars(c.message) for c in result.choices)
            result.usage = _estimate(_prompt_chars(request), chars)
        return result

    async def completion(self, request: CompletionRequest) -> Completion:
        """One legacy text completion."""
        content = await self._post("completions", self._to_wire(request, stream=False))
        result = self._from_wire(Completion, content)
        result.model = request.model
        if result.usage is None:
            chars = sum(len(c.text) for c in result.choices)
            result.usage = _estimate(_prompt_chars(request), chars)
        return result

    async def embeddings(self, request: EmbeddingRequest) -> EmbeddingResponse:
        """``POST /embeddings``: the client's fields pass through, ``model`` is replaced."""
        body = request.model_dump(exclude_none=True, by_alias=True)
        body["model"] = self._settings.model
        result = self._from_wire(EmbeddingResponse, await self._post("embeddings", body))
        result.model = request.model
        return result

    # --- streams -------------------------------------------------------------------------

    def chat_stream(self, request: ChatCompletionRequest) -> AsyncIterator[ChatCompletionChunk]:
        """Yield parsed chunks; the last has ``choices == []`` and ``usage``."""
        return self._parsed_stream(
            "chat/completions", request, ChatCompletionChunk, _chunk_chars, "chatcmpl"
        )

    def completion_stream(self, request: CompletionRequest) -> AsyncIterator[Completion]:
        """Yield text-completion chunks; the last has ``choices == []`` and ``usage``."""
        return self._parsed_stream(
            "completions",
            request,
            Completion,
            lambda chunk: sum(len(c.text) for c in chunk.choices),
            "cmpl",
        )

    async def _parsed_stream(
        self,
        path: str,
        request: ChatCompletionRequest | CompletionRequest,
        kind: type[_C],
        chars_of: Callable[[_C], int],
        id_prefix: str,
    ) -> AsyncIterator[_C]:
        """The upstream's chunks, parsed; its usage chunk (or an estimate) comes last."""
        blocks = self._data_blocks(path, self._to_wire(request, stream=True))
        usage: Usage | None = None
        head: _C | None = None
        chars = 0
        async with aclosing(blocks):
            async for block, _ in blocks:
                for frame in frames_of(block):
                    chunk = self._parse(kind, frame[5:])
                    chunk.model = request.model
                    if isinstance(chunk, ChatCompletionChunk):
                        for choice in chunk.choices:
                            _read_reasoning(choice.delta)
                    head = head or chunk
                    if chunk.usage is not None:
                        usage, chunk.usage = chunk.usage, None
                        if not chunk.choices:
                            continue
                    chars += chars_of(chunk)
                    yield chunk
        yield kind(
            id=head.id if head else new_id(id_prefix),
            created=head.created if head else now(),
            model=request.model,
            choices=[],
            usage=usage or _estimate(_prompt_chars(request), chars),
        )

    def chat_stream_raw(self, request: ChatCompletionRequest) -> RawChatStream:
        """The upstream's SSE frames as bytes, without parsing each chunk (see RawChatStream)."""
        blocks = self._data_blocks("chat/completions", self._to_wire(request, stream=True))
        prompt_tokens = estimate_tokens(_prompt_chars(request))
        public = self._public_names.get(request.model)
        if public is None:  # public names come from the config: a handful
            public = self._public_names[request.model] = json.dumps(request.model).encode()
        return RawChatStream(blocks, self.name, prompt_tokens, request.model, public)

    # --- wire ----------------------------------------------------------------------------

    def _to_wire(
        self, request: ChatCompletionRequest | CompletionRequest, *, stream: bool
    ) -> dict[str, Any]:
        body = request.model_dump(exclude_none=True, by_alias=True)
        body["model"] = self._settings.model
        body["stream"] = stream
        field = self._budget_field
        if field is not None and isinstance(request, ChatCompletionRequest):
            _name_budget(body, field)
        if stream:
            body["stream_options"] = {**body.get("stream_options", {}), "include_usage": True}
        else:
            body.pop("stream_options", None)
        return body

    def _from_wire(self, model: type[_M], content: bytes) -> _M:
        parsed = self._parse(model, content)
        if isinstance(parsed, ChatCompletion):
            for choice in parsed.choices:
                _read_reasoning(choice.message)
        return parsed

    def _parse(self, model: type[_M], data: bytes) -> _M:
        try:
            return jsonio.validate_json(model, data)
        except ValidationError as exc:
            what = f"sent an invalid {model.__name__}: {exc.errors()[0]['msg']}"
            raise protocol_error(self.name, what) from None

    async def _data_blocks(
        self, path: str, body: dict[str, Any]
    ) -> AsyncGenerator[tuple[bytes, int], None]:
        """Yield the ``data: {...}`` frames of each read as one block (each frame followed
        by its blank line) and their number, up to ``[DONE]``, the usage-only chunk, or the
        end of a body whose answer finished. An error frame raises once the frames before
        it are yielded; a body that ends before any ``finish_reason`` raises
        :class:`~gateway.errors.StreamCutError`."""
        upstream = self._require_upstream()
        self._in_flight += 1
        # the last blocks, at least as many frames as _TAIL_FRAMES: a finish_reason, if
        # any, is among them
        tail = (b"",) * _TAIL_FRAMES
        try:
            with self._map_errors():
                async with upstream.stream(
                    path, encode_json(body), self._settings.timeouts
                ) as frames:
                    async for raw in frames.blocks():
                        block, count, last, error = _data_of(raw)
                        if count:
                            yield block, count
                            tail = (*tail[1:], block)
                            # the usage-only chunk closes every stream: [DONE] is all
                            # that follows, and nothing waits for it
                            last = last or usage_only(last_frame(block))
                        if error is not None:
                            raise self._in_band_error(error)
                        if last:
                            await frames.finish(_TAIL_S)
                            return
            if not any(finishes(frame) for frame in frames_of(b"".join(tail))[-_TAIL_FRAMES:]):
                raise cut_error(self.name, "stream ended before its answer finished")
        finally:
            self._in_flight -= 1

    def _in_band_error(self, data: bytes) -> GatewayError:
        """An error sent inside a stream: ``{"error": {...}}`` or vLLM's ``{"object": "error"}``."""
        payload = load_json(data, self.name)
        err = payload.get("error") if isinstance(payload, dict) else None
        detail = err if isinstance(err, dict) else payload
        code = detail.get("code") if isinstance(detail, dict) else None
        redactor = self._redactor()
        body = json.dumps({"error": detail})
        if isinstance(code, int) and 400 <= code < 600:
            return error_for_status(self.name, code, body, {}, redactor)
        message = detail.get("message") if isinstance(detail, dict) else None
        shown = redactor.for_client(message if isinstance(message, str) else body[:300])
        exc = UpstreamError(f"upstream {self.name} sent an error mid-stream: {shown}")
        return annotate(exc, counts_as_failure=True, upstream_body=redactor.for_log(body))


def _name_budget(body: dict[str, Any], field: str) -> None:
    """Send the output budget under ``field`` (one name, the other taken out)."""
    other = "max_tokens" if field == "max_completion_tokens" else "max_completion_tokens"
    budget = body.pop(other, None)
    if budget is not None:
        body.setdefault(field, budget)


def _read_reasoning(message: AssistantMessage | ChoiceDelta) -> None:
    """An upstream's ``reasoning`` (OpenRouter, newer vLLM) read as ``reasoning_content``
    (DeepSeek's, llama.cpp's server's and the gateway's own name) too; ``reasoning`` stays,
    as a streamed answer's frames keep it, for the clients that read that name."""
    extra = message.model_extra
    reasoning = extra.get("reasoning") if extra else None
    if isinstance(reasoning, str) and message.reasoning_content is None:
        message.reasoning_content = reasoning


def _data_of(raw: bytes) -> tuple[bytes, int, bool, bytes | None]:
    """A block's data frames and how many; whether ``[DONE]`` came; an error frame's
    JSON, if any. Plain ``data:`` frames before any that may be ``[DONE]`` or an error
    (all of a read but the stream's last, from OpenAI-compatible servers) are passed on
    as they came; only the frames from there on are looked at one by one."""
    if b"[DONE]" not in raw and b'"error"' not in raw:  # every read of a stream but its last
        # one one-line event (a token-by-token server's read): its first newline ends it;
        # in a read of several, the search stops at the end of the first
        if raw.find(b"\n") == len(raw) - 2 and raw.startswith(b"data:") and raw.endswith(b"\n\n"):
            return raw, 1, False, None
        frames = data_events(raw)
        return (raw, frames, False, None) if frames else _sorted_block(raw)
    cut = frame_start(raw, b"[DONE]", b'"error"')
    head = raw[:cut]
    frames = data_events(head)
    if not frames:
        return _sorted_block(raw)
    rest, more, done, error = _sorted_block(raw[cut:])
    return head + rest, frames + more, done, error


def _sorted_block(raw: bytes) -> tuple[bytes, int, bool, bytes | None]:
    """:func:`_data_of` frame by frame: events with ``event:``, comment or several ``data``
    lines are rebuilt as one ``data:`` line; nothing after ``[DONE]`` or an error frame."""
    kept: list[bytes] = []
    for event in frames_of(raw):
        frame = data_frame(event)
        if frame is None:
            continue
        if frame.endswith(b"[DONE]"):
            return block_of(kept), len(kept), True, None
        if b'"error"' in frame[:32]:
            return block_of(kept), len(kept), False, frame[5:]
        kept.append(frame)
    return block_of(kept), len(kept), False, None


def _sum_stats(parts: list[LiveStats]) -> LiveStats:
    def total(name: str) -> Any:
        values = [getattr(p, name) for p in parts if getattr(p, name) is not None]
        return sum(values) if values else None

    return LiveStats(
        in_flight=sum(p.in_flight for p in parts),
        queue_depth=sum(p.queue_depth for p in parts),
        slots_busy=total("slots_busy"),
        slots_total=total("slots_total"),
        kv_used=total("kv_used"),
        kv_total=total("kv_total"),
        prefill_tokens_per_s=total("prefill_tokens_per_s"),
        decode_tokens_per_s=total("decode_tokens_per_s"),
        queue_limit=total("queue_limit"),
        held_prefixes=_held(parts),
        kv_fingerprint=_one({p.kv_fingerprint for p in parts}),
        kv_bytes_per_token=_one_number({p.kv_bytes_per_token for p in parts}),
        held_sequences=tuple(
            (str(link), int(depth)) for p in parts for link, depth in p.held_sequences
        ),
        draining=any(p.draining for p in parts),
    )


def _one(values: set[str | None]) -> str | None:
    """The value all share, if they share one."""
    return values.pop() if len(values) == 1 else None


def _one_number(values: set[float | None]) -> float | None:
    """The number all share, if they share one."""
    return values.pop() if len(values) == 1 else None


HELD_MAX = 8192
"""Prefix links kept of a worker's report at most (a worker reports a few thousand)."""


def _held(parts: list[LiveStats]) -> Mapping[str, int]:
    """The prefix links any of a worker's deployments holds, each at its deepest."""
    held: dict[str, int] = {}
    for part in parts:
        for link, depth in part.held_prefixes.items():
            if len(held) >= HELD_MAX:
                return held
            if isinstance(depth, int) and depth > held.get(link, -1):
                held[link] = depth
    return held


def _prompt_chars(request: ChatCompletionRequest | CompletionRequest) -> int:
    if isinstance(request, CompletionRequest):
        prompt = request.prompt
        return len(prompt) if isinstance(prompt, str) else sum(len(p) for p in prompt)
    return sum(len(m.text()) for m in request.messages)


def _message_chars(message: AssistantMessage) -> int:
    calls = message.tool_calls or []
    return len(message.content or "") + sum(len(c.function.arguments) for c in calls)


def _chunk_chars(chunk: ChatCompletionChunk) -> int:
    chars = 0
    for choice in chunk.choices:
        delta = choice.delta
        chars += len(delta.content or "")
        for call in delta.tool_calls or ():
            chars += len((call.function or {}).get("arguments", ""))
    return chars


def estimate_tokens(chars: int) -> int:
    """Tokens for ``chars`` characters when the upstream reports none: about 4 per token."""
    return (chars + 3) // 4


def _estimate(prompt_chars: int, completion_chars: int) -> Usage:
    """Usage counted here when the upstream reports none (about 4 characters per token)."""
    return Usage.of(estimate_tokens(prompt_chars), estimate_tokens(completion_chars))
