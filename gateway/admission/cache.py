"""Exact response cache: the same request to the same model gets the stored answer.

The key is SHA-256 of the API key's identity, the model and the canonical JSON of the
request (keys sorted, ``null`` fields dropped) without ``stream``, ``stream_options`` and
``user``, so a streamed and a non-streamed request share an entry. Entries are per API key:
a hit never hands one key's answer (and with it, another tenant's prompt) to a different
key; requests in open mode share the ``anonymous`` identity.

Caching is opt-in per model (:class:`CacheRule`) and, unless the rule says
``any_temperature``, only for ``temperature: 0`` (an absent temperature means the model's
default, 1, so it is not cached).

Only whole (non-stream) responses are stored; a streaming client gets the stored response
replayed as chunks (:func:`chat_chunks`, :func:`completion_chunks`). Replays get a fresh
``id`` and ``created``. A store outage turns lookups into misses and drops writes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import structlog
from pydantic import ValidationError

from gateway.config import CacheRule
from gateway.protocol import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChoiceDelta,
    ChunkChoice,
    Completion,
    CompletionChoice,
    CompletionRequest,
    ToolCallDelta,
    new_id,
    now,
)
from gateway.state.base import StateStore, StateUnavailable

R = TypeVar("R", ChatCompletion, Completion)
T = TypeVar("T")
log = structlog.get_logger("shunter.cache")
_IGNORED = {"stream", "stream_options", "user"}


@dataclass(frozen=True)
class CacheKey:
    """Where a request's answer is cached, and for how long."""

    model: str
    digest: str
    ttl_s: float


@dataclass
class CacheStats:
    """Counters for the metrics owner."""

    hits: int = 0
    misses: int = 0
    stores: int = 0
    errors: int = 0


def request_digest(request: ChatCompletionRequest | CompletionRequest, owner: str) -> str:
    """SHA-256 of (owner, model, canonical request JSON minus stream/stream_options/user);
    ``owner`` is the API key's id."""
    kind = "chat" if isinstance(request, ChatCompletionRequest) else "completion"
    body = request.model_dump(mode="json", by_alias=True, exclude_none=True, exclude=_IGNORED)
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    text = f"{owner}\n{kind}\n{request.model}\n{canonical}"
    return hashlib.sha256(text.encode()).hexdigest()


class ResponseCache:
    """Exact-match cache of whole responses, on a :class:`StateStore`."""

    def __init__(
        self, store: StateStore, rules: Mapping[str, CacheRule], *, max_bytes: int = 1 << 20
    ) -> None:
        self.store = store
        self.rules = dict(rules)
        self.max_bytes = max_bytes
        self.stats = CacheStats()

    def key(
        self, request: ChatCompletionRequest | CompletionRequest, owner: str
    ) -> CacheKey | None:
        """The cache key of ``request`` sent with the API key whose id is ``owner``, or None
        when this request may not be cached."""
        rule = self.rules.get(request.model)
        if rule is None:
            return None
        if not rule.any_temperature and request.temperature != 0:
            return None
        return CacheKey(request.model, request_digest(request, owner), rule.ttl_s)

    async def get(self, key: CacheKey, kind: type[R]) -> R | None:
        """The cached response (with a fresh id and time), or None."""
        try:
            raw = await self.store.cache_get(key.digest)
        except StateUnavailable:
            self.stats.errors += 1
            raw = None
        if raw is None:
            self.stats.misses += 1
            return None
        try:
            response = kind.model_validate_json(raw)
        except ValidationError:
            log.warning("cache_entry_unreadable", model=key.model)
            self.stats.misses += 1
            return None
        self.stats.hits += 1
        prefix = "chatcmpl" if kind is ChatCompletion else "cmpl"
        return response.model_copy(update={"id": new_id(prefix), "created": now()})

    async def put(self, key: CacheKey, response: ChatCompletion | Completion) -> None:
        """Store a whole response; too large ones and store outages are skipped."""
        raw = response.model_dump_json().encode()
        if len(raw) > self.max_bytes:
            return
        try:
            await self.store.cache_set(key.digest, raw, key.ttl_s)
        except StateUnavailable:
            self.stats.errors += 1
            return
        self.stats.stores += 1


def chat_chunks(response: ChatCompletion) -> list[ChatCompletionChunk]:
    """A whole chat response as the stream OpenAI would have sent: role, content, tool
    calls and finish per choice, then one ``choices: []`` chunk with usage."""
    chunks: list[ChatCompletionChunk] = []

    def chunk(choice: ChunkChoice) -> None:
        chunks.append(_chat_chunk(response, [choice]))

    for choice in response.choices:
        chunk(ChunkChoice(index=choice.index, delta=ChoiceDelta(role="assistant", content="")))
        if choice.message.content:
            chunk(
                ChunkChoice(index=choice.index, delta=ChoiceDelta(content=choice.message.content))
            )
        if choice.message.tool_calls:
            calls = [
                ToolCallDelta(
                    index=i,
                    id=call.id,
                    type="function",
                    function={"name": call.function.name, "arguments": call.function.arguments},
                )
                for i, call in enumerate(choice.message.tool_calls)
            ]
            chunk(ChunkChoice(index=choice.index, delta=ChoiceDelta(tool_calls=calls)))
        chunk(
            ChunkChoice(
                index=choice.index,
                delta=ChoiceDelta(),
                logprobs=choice.logprobs,
                finish_reason=choice.finish_reason,
            )
        )
    if response.usage is not None:
        chunks.append(_chat_chunk(response, []).model_copy(update={"usage": response.usage}))
    return chunks


def completion_chunks(response: Completion) -> list[Completion]:
    """A whole text completion as stream chunks, closing with a usage chunk."""
    chunks: list[Completion] = []
    for choice in response.choices:
        chunks.append(
            _completion_chunk(response, [CompletionChoice(text=choice.text, index=choice.index)])
        )
        final = CompletionChoice(text="", index=choice.index, finish_reason=choice.finish_reason)
        chunks.append(_completion_chunk(response, [final]))
    if response.usage is not None:
        chunks.append(_completion_chunk(response, []).model_copy(update={"usage": response.usage}))
    return chunks


async def replay(chunks: Iterable[T]) -> AsyncIterator[T]:
    """Chunks as an async iterator, for code that consumes upstream streams."""
    for item in chunks:
        yield item


def _chat_chunk(response: ChatCompletion, choices: list[ChunkChoice]) -> ChatCompletionChunk:
    return ChatCompletionChunk(
        id=response.id,
        choices=choices,
        created=response.created,
        model=response.model,
        system_fingerprint=response.system_fingerprint,
    )


def _completion_chunk(response: Completion, choices: list[CompletionChoice]) -> Completion:
    return Completion(
        id=response.id,
        choices=choices,
        created=response.created,
        model=response.model,
        system_fingerprint=response.system_fingerprint,
    )
