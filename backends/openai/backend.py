"""OpenAI and every OpenAI-compatible server (Together, Groq, OpenRouter, remote vLLM, ...).

Requests go out as the client sent them: tools, ``response_format``, logprobs and unknown
fields pass through unchanged; only ``model`` is replaced by the deployment's upstream
model. Streams always ask the upstream for usage; an upstream that sends none gets its
usage counted here (about 4 characters per token, see
:func:`backends.http.plumbing.estimate_tokens`).

Two stream paths:

* :meth:`OpenAICompatBackend.chat_stream` parses every chunk into
  :class:`ChatCompletionChunk` (the :class:`~backends.base.Backend` contract);
* :meth:`OpenAICompatBackend.chat_stream_raw` passes the upstream's frames through as
  bytes, peeking only for errors and the usage chunk (:class:`RawChatStream`). It is
  cheaper, but nothing in a chunk is checked or rewritten (``model`` stays the upstream's).
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import AbstractContextManager, aclosing
from dataclasses import replace
from typing import Any, Literal, TypeVar

import httpx
from pydantic import BaseModel, Field, ValidationError

from backends.base import Capabilities, LiveStats
from backends.http.plumbing import (
    HTTPDeploymentSettings,
    annotate,
    data_frame,
    encode_json,
    error_for_status,
    estimate_tokens,
    load_json,
    map_transport_errors,
    protocol_error,
    read_api_key,
)
from backends.http.redact import Redactor
from backends.http.upstream import Upstream, make_upstream
from gateway.common.periodic import Periodic
from gateway.errors import GatewayError, UpstreamError
from gateway.protocol import (
    AssistantMessage,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Completion,
    CompletionRequest,
    EmbeddingRequest,
    EmbeddingResponse,
    Usage,
    new_id,
    now,
)

_M = TypeVar("_M", bound=BaseModel)
_C = TypeVar("_C", ChatCompletionChunk, Completion)


class OpenAICompatSettings(HTTPDeploymentSettings):
    """One deployment behind an OpenAI-compatible API."""

    backend: Literal["openai"]
    base_url: str = "https://api.openai.com/v1"
    chat: bool = True
    completions: bool = True
    embeddings: bool = False
    tools: bool = True
    json_schema: bool = True
    images: bool = True
    worker_stats: bool = Field(
        default=False,
        description="the upstream is a shunter worker: poll its live figures for routing",
    )


class OpenAICompatBackend:
    """A :class:`~backends.base.Backend` over one pooled HTTP/1.1 client."""

    def __init__(
        self,
        settings: OpenAICompatSettings,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._settings = settings
        self._transport = transport
        self._upstream: Upstream | None = None
        self._in_flight = 0
        self._remote: LiveStats | None = None
        self._poller = Periodic(1.0, self._poll_worker)

    @property
    def name(self) -> str:
        return self._settings.name

    @property
    def settings(self) -> OpenAICompatSettings:
        return self._settings

    @property
    def capabilities(self) -> Capabilities:
        s = self._settings
        return Capabilities(
            chat=s.chat,
            completions=s.completions,
            embeddings=s.embeddings,
            tools=s.tools,
            json_schema=s.json_schema,
            images=s.images,
            context_length=s.context_length,
        )

    async def start(self) -> None:
        """Read the API key and open the connection pool."""
        if self._upstream is not None:
            return
        key = read_api_key(self._settings.api_key_env)
        auth = {"authorization": f"Bearer {key}"} if key else {}
        self._upstream = make_upstream(self._settings, auth, self._transport)
        if self._settings.worker_stats:
            await self._poll_worker()
            self._poller.start()

    async def aclose(self) -> None:
        """Close the pool; streams still open are cut."""
        await self._poller.stop()
        upstream, self._upstream = self._upstream, None
        if upstream is not None:
            await upstream.aclose()

    def stats(self) -> LiveStats:
        if self._remote is None:
            return LiveStats(in_flight=self._in_flight)
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
        if result.usage is None:
            chars = sum(_message_chars(c.message) for c in result.choices)
            result.usage = _estimate(_prompt_chars(request), chars)
        return result

    async def completion(self, request: CompletionRequest) -> Completion:
        """One legacy text completion."""
        content = await self._post("completions", self._to_wire(request, stream=False))
        result = self._from_wire(Completion, content)
        if result.usage is None:
            chars = sum(len(c.text) for c in result.choices)
            result.usage = _estimate(_prompt_chars(request), chars)
        return result

    async def embeddings(self, request: EmbeddingRequest) -> EmbeddingResponse:
        """``POST /embeddings``: the client's fields pass through, ``model`` is replaced."""
        body = request.model_dump(exclude_none=True, by_alias=True)
        body["model"] = self._settings.model
        return self._from_wire(EmbeddingResponse, await self._post("embeddings", body))

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
        batches = self._data_frames(path, self._to_wire(request, stream=True))
        usage: Usage | None = None
        head: _C | None = None
        chars = 0
        async with aclosing(batches):
            async for batch in batches:
                for frame in batch:
                    chunk = self._parse(kind, frame[5:])
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
            model=head.model if head else self._settings.model,
            choices=[],
            usage=usage or _estimate(_prompt_chars(request), chars),
        )

    def chat_stream_raw(self, request: ChatCompletionRequest) -> RawChatStream:
        """The upstream's SSE frames as bytes, without parsing each chunk (see RawChatStream)."""
        frames = self._data_frames("chat/completions", self._to_wire(request, stream=True))
        prompt_tokens = estimate_tokens(_prompt_chars(request))
        return RawChatStream(frames, self.name, prompt_tokens, self._settings.model)

    # --- wire ----------------------------------------------------------------------------

    def _to_wire(
        self, request: ChatCompletionRequest | CompletionRequest, *, stream: bool
    ) -> dict[str, Any]:
        body = request.model_dump(exclude_none=True, by_alias=True)
        body["model"] = self._settings.model
        body["stream"] = stream
        if stream:
            body["stream_options"] = {**body.get("stream_options", {}), "include_usage": True}
        else:
            body.pop("stream_options", None)
        return body

    def _from_wire(self, model: type[_M], content: bytes) -> _M:
        return self._parse(model, content)

    def _parse(self, model: type[_M], data: bytes) -> _M:
        try:
            return model.model_validate_json(data)
        except ValidationError as exc:
            what = f"sent an invalid {model.__name__}: {exc.errors()[0]['msg']}"
            raise protocol_error(self.name, what) from None

    def _map_errors(self) -> AbstractContextManager[None]:
        """Transport failures (connect, timeout, reset) onto gateway.errors."""
        return map_transport_errors(self.name, self._redactor())

    def _redactor(self) -> Redactor:
        return self._upstream.redactor if self._upstream is not None else Redactor()

    def _require_upstream(self) -> Upstream:
        if self._upstream is None:
            raise RuntimeError(f"backend {self.name} is not started")
        return self._upstream

    async def _post(self, path: str, body: dict[str, Any]) -> bytes:
        upstream = self._require_upstream()
        self._in_flight += 1
        try:
            return await upstream.post(path, encode_json(body), self._settings.timeouts.total_s)
        finally:
            self._in_flight -= 1

    async def _data_frames(
        self, path: str, body: dict[str, Any]
    ) -> AsyncGenerator[list[bytes], None]:
        """Yield the ``data: {...}`` frames (no blank line) of each read, up to ``[DONE]``,
        which must come. An error frame raises once the frames before it are yielded."""
        upstream = self._require_upstream()
        self._in_flight += 1
        try:
            with self._map_errors():
                async with upstream.stream(
                    path, encode_json(body), self._settings.timeouts
                ) as frames:
                    async for raw_batch in frames:
                        batch: list[bytes] = []
                        for raw in raw_batch:
                            frame = data_frame(raw)
                            if frame is None:
                                continue
                            if frame.endswith(b"[DONE]"):
                                if batch:
                                    yield batch
                                await frames.finish()
                                return
                            if b'"error"' in frame[:32]:
                                if batch:
                                    yield batch
                                raise self._in_band_error(frame[5:])
                            batch.append(frame)
                        if batch:
                            yield batch
            raise protocol_error(self.name, "stream ended before [DONE]")
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
    )


class RawChatStream:
    """Upstream chat frames as bytes (``data: {...}\\n\\n``), with cheap peeking only.

    Yields every chunk frame except the usage-only one and ``[DONE]``, the frames of one
    upstream read together (nothing waits for more to arrive); the caller writes
    those: after the stream ends, :attr:`usage` and :attr:`usage_frame` are set (the
    upstream's own usage chunk, or one built here), then ``data: [DONE]``. Errors sent
    in-band and streams cut before ``[DONE]`` raise as in :meth:`OpenAICompatBackend.chat_stream`.

    Trade-off: no chunk is validated or rewritten, so ``id``/``model``/extra fields are the
    upstream's, and a malformed chunk reaches the client. When the upstream sends no usage,
    ``completion_tokens`` is the number of chunk frames (about one token each), because
    counting characters would need a parse.
    """

    def __init__(
        self,
        frames: AsyncGenerator[list[bytes], None],
        deployment: str,
        prompt_tokens: int,
        model: str,
    ) -> None:
        self._frames = frames
        self._deployment = deployment
        self._prompt_tokens = prompt_tokens
        self._model = model
        self._first: bytes | None = None
        self._count = 0
        self.usage: Usage | None = None
        self.usage_frame: bytes | None = None

    def __aiter__(self) -> RawChatStream:
        return self

    async def __anext__(self) -> bytes:
        """The frames of the next upstream read, written as one piece."""
        while True:
            try:
                batch = await self._frames.__anext__()
            except StopAsyncIteration:
                self._finish()
                raise
            if self._first is None:
                self._first = batch[0]
            out = [f for f in batch if b'"usage"' not in f or not self._take_usage(f)]
            if out:
                self._count += len(out)
                return b"\n\n".join(out) + b"\n\n"

    async def aclose(self) -> None:
        """Stop reading and close the upstream response at once."""
        await self._frames.aclose()

    async def __aenter__(self) -> RawChatStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _take_usage(self, frame: bytes) -> bool:
        """Record the usage in ``frame``, if any; True if it is the usage-only chunk."""
        if b'"usage":null' in frame or b'"usage": null' in frame:
            return False
        payload = load_json(frame[5:], self._deployment)
        usage = payload.get("usage") if isinstance(payload, dict) else None
        if usage is None:
            return False
        try:
            self.usage = Usage.model_validate(usage)
        except ValidationError:
            raise protocol_error(self._deployment, "sent an invalid usage object") from None
        if payload.get("choices"):
            return False
        self.usage_frame = frame + b"\n\n"
        return True

    def _finish(self) -> None:
        if self.usage is None:
            self.usage = Usage.of(self._prompt_tokens, self._count)
        if self.usage_frame is None:
            head = load_json(self._first[5:], self._deployment) if self._first else {}
            chunk: dict[str, Any] = {
                "id": head.get("id") or new_id("chatcmpl"),
                "choices": [],
                "created": head.get("created") or now(),
                "model": head.get("model") or self._model,
                "object": "chat.completion.chunk",
                "usage": self.usage.model_dump(),
            }
            self.usage_frame = b"data: " + encode_json(chunk) + b"\n\n"


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


def _estimate(prompt_chars: int, completion_chars: int) -> Usage:
    """Usage counted here when the upstream reports none (about 4 characters per token)."""
    return Usage.of(estimate_tokens(prompt_chars), estimate_tokens(completion_chars))
