"""A backend that wraps another: every method forwarded, so a wrapper overrides only what
it changes (loading a model on demand, judging an answer).

An ability the wrapped backend has stays, with its flag in ``capabilities``; a wrapper that
takes one away says so in its own ``capabilities`` (and may restore the refusing default
of :class:`~backends.base.Backend` for the method).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

from backends.base import Backend, Capabilities, LiveStats
from backends.kv import KvHeader, KvImported
from gateway.protocol import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Completion,
    CompletionRequest,
    EmbeddingRequest,
    EmbeddingResponse,
    Usage,
)
from gateway.protocol.frames import FrameStream


class WrapperBackend(Backend):
    """Forwards every :class:`~backends.base.Backend` method to ``inner``."""

    def __init__(self, inner: Backend) -> None:
        self._backend = inner

    @property
    def inner(self) -> Backend:
        """The backend this one wraps."""
        return self._backend

    @property
    def name(self) -> str:
        return self._backend.name

    @property
    def capabilities(self) -> Capabilities:
        return self._backend.capabilities

    async def start(self) -> None:
        await self._backend.start()

    async def aclose(self) -> None:
        await self._backend.aclose()

    def stats(self) -> LiveStats:
        return self._backend.stats()

    async def chat(self, request: ChatCompletionRequest) -> ChatCompletion:
        return await self._backend.chat(request)

    def chat_stream(self, request: ChatCompletionRequest) -> AsyncIterator[ChatCompletionChunk]:
        return self._backend.chat_stream(request)

    async def completion(self, request: CompletionRequest) -> Completion:
        return await self._backend.completion(request)

    def completion_stream(self, request: CompletionRequest) -> AsyncIterator[Completion]:
        return self._backend.completion_stream(request)

    async def embeddings(self, request: EmbeddingRequest) -> EmbeddingResponse:
        return await self._backend.embeddings(request)

    def chat_stream_raw(self, request: ChatCompletionRequest) -> FrameStream:
        return self._backend.chat_stream_raw(request)

    async def count_tokens(self, request: ChatCompletionRequest) -> int:
        return await self._backend.count_tokens(request)

    async def native(
        self, api: str, body: bytes, headers: Mapping[str, str] | None = None
    ) -> tuple[bytes, Usage]:
        return await self._backend.native(api, body, headers)

    def native_stream(
        self, api: str, body: bytes, headers: Mapping[str, str] | None = None
    ) -> FrameStream:
        return self._backend.native_stream(api, body, headers)

    async def count_native_tokens(
        self, api: str, body: bytes, headers: Mapping[str, str] | None = None
    ) -> int:
        return await self._backend.count_native_tokens(api, body, headers)

    async def export_kv(self, link: str) -> tuple[KvHeader, AsyncIterator[bytes]]:
        return await self._backend.export_kv(link)

    async def import_kv(self, header: KvHeader, chunks: AsyncIterator[bytes]) -> KvImported:
        return await self._backend.import_kv(header, chunks)

    async def health(self, timeout_s: float) -> bool | None:
        return await self._backend.health(timeout_s)
