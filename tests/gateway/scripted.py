"""A backend of our own contract whose answers are scripted, for dispatcher tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from backends.base import Capabilities, LiveStats
from gateway.errors import GatewayError
from gateway.protocol import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Completion,
    CompletionRequest,
)


@dataclass
class ScriptedBackend:
    """Each call takes the next step: an error to raise, or the text to answer."""

    name: str
    script: list[GatewayError | str] = field(default_factory=list)
    calls: int = 0

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities()

    async def start(self) -> None:
        return None

    async def aclose(self) -> None:
        return None

    def stats(self) -> LiveStats:
        return LiveStats()

    def _next(self) -> str:
        self.calls += 1
        step = self.script.pop(0) if self.script else "ok"
        if isinstance(step, GatewayError):
            raise step
        return step

    async def chat(self, request: ChatCompletionRequest) -> ChatCompletion:
        return ChatCompletion.model_validate(
            {"model": self.name, "choices": [{"message": {"content": self._next()}}]}
        )

    async def chat_stream(
        self, request: ChatCompletionRequest
    ) -> AsyncIterator[ChatCompletionChunk]:
        text = self._next()
        yield ChatCompletionChunk.model_validate(
            {"id": "c", "created": 0, "model": self.name, "choices": [{"delta": {"content": text}}]}
        )

    async def completion(self, request: CompletionRequest) -> Completion:
        raise NotImplementedError

    def completion_stream(self, request: CompletionRequest) -> AsyncIterator[Completion]:
        raise NotImplementedError
