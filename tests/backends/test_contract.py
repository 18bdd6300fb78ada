"""The backend contract: optional abilities refuse by default, the capability flags say which
a backend has, and a wrapper forwards all of it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from backends.anthropic import AnthropicBackend, AnthropicSettings
from backends.base import Backend, Capabilities, LiveStats, NotSupportedError
from backends.openai import OpenAICompatBackend, OpenAICompatSettings
from backends.vllm import VLLMBackend, VLLMSettings
from backends.wrapper import WrapperBackend
from gateway.protocol import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Completion,
    CompletionRequest,
    EmbeddingRequest,
)

CHAT = ChatCompletionRequest.model_validate(
    {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
)


class Plain(Backend):
    """Only what every backend must have; every ability is left to the defaults."""

    def __init__(self, stalled: bool | None = None) -> None:
        self.stalled = stalled

    @property
    def name(self) -> str:
        return "plain"

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities()

    async def start(self) -> None:
        return None

    async def aclose(self) -> None:
        return None

    def stats(self) -> LiveStats:
        return LiveStats(stalled=self.stalled)

    async def chat(self, request: ChatCompletionRequest) -> ChatCompletion:
        raise AssertionError("not called here")

    async def chat_stream(
        self, request: ChatCompletionRequest
    ) -> AsyncIterator[ChatCompletionChunk]:
        raise AssertionError("not called here")
        yield

    async def completion(self, request: CompletionRequest) -> Completion:
        raise AssertionError("not called here")

    async def completion_stream(self, request: CompletionRequest) -> AsyncIterator[Completion]:
        raise AssertionError("not called here")
        yield


async def test_an_ability_a_backend_lacks_is_refused_as_the_requests_fault() -> None:
    backend = Plain()
    calls = [
        backend.embeddings(EmbeddingRequest(model="m", input="x")),
        backend.count_tokens(CHAT),
        backend.native("messages", b"{}"),
        backend.count_native_tokens("messages", b"{}"),
    ]
    for call in calls:
        with pytest.raises(NotSupportedError) as caught:
            await call
        error = caught.value
        assert error.status_code == 400 and error.code == "not_supported"
        assert not error.counts_as_failure and "'plain'" in error.message
    for start in (
        lambda: backend.chat_stream_raw(CHAT),
        lambda: backend.native_stream("messages", b"{}"),
    ):
        with pytest.raises(NotSupportedError):
            start()


async def test_health_is_the_backends_own_state_unless_it_asks_its_upstream() -> None:
    assert await Plain().health(1.0) is True
    assert await Plain(stalled=False).health(1.0) is True
    assert await Plain(stalled=True).health(1.0) is False


def test_a_wrapper_forwards_every_method_of_the_contract() -> None:
    contract = {
        name
        for name, member in vars(Backend).items()
        if not name.startswith("_") and name != "not_supported"
        if callable(member) or isinstance(member, property)
    }
    assert {"health", "chat_stream_raw", "native", "count_tokens"} <= contract
    assert contract <= set(vars(WrapperBackend)), contract - set(vars(WrapperBackend))


class Recording(Plain):
    """Says which of its methods were called, with what."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(count_tokens=True, native_apis=frozenset({"messages"}))

    async def count_tokens(self, request: ChatCompletionRequest) -> int:
        self.calls.append("count_tokens")
        return 7

    async def native(self, api: str, body: bytes, headers: Any = None) -> tuple[bytes, Any]:
        self.calls.append(f"native {api}")
        return b"{}", None

    async def health(self, timeout_s: float) -> bool | None:
        self.calls.append(f"health {timeout_s:g}")
        return None


async def test_a_wrapper_keeps_the_abilities_of_what_it_wraps() -> None:
    inner = Recording()
    wrapper = WrapperBackend(inner)
    assert wrapper.name == "plain" and wrapper.inner is inner
    assert wrapper.capabilities.count_tokens and wrapper.capabilities.native_apis
    assert await wrapper.count_tokens(CHAT) == 7
    assert await wrapper.native("messages", b"{}") == (b"{}", None)
    assert await wrapper.health(2.0) is None
    assert inner.calls == ["count_tokens", "native messages", "health 2"]
    with pytest.raises(NotSupportedError):
        await wrapper.embeddings(EmbeddingRequest(model="m", input="x"))


def test_each_backend_says_what_it_answers() -> None:
    common: dict[str, Any] = {"name": "d", "model": "m"}
    openai = OpenAICompatBackend(OpenAICompatSettings(backend="openai", **common))
    anthropic = AnthropicBackend(AnthropicSettings(backend="anthropic", **common))
    vllm = VLLMBackend(VLLMSettings(backend="vllm", **common))
    backends: list[Backend] = [openai, anthropic, vllm]
    flags = [(b.capabilities.chat_stream_raw, b.capabilities.native_apis) for b in backends]
    assert flags == [(True, frozenset()), (False, {"messages"}), (True, frozenset())]
    for backend in backends:
        raw = type(backend).chat_stream_raw is not Backend.chat_stream_raw
        assert raw == backend.capabilities.chat_stream_raw, type(backend)
        native = type(backend).native is not Backend.native
        assert native == bool(backend.capabilities.native_apis), type(backend)
