"""A cascade step's backend: asks for token logprobs, gathers them, hides them if unasked.

:class:`JudgedBackend` wraps one deployment's backend for one request. Every chat and text
completion it runs asks the upstream (or engine) for token logprobs; as the answer passes
through, whole or chunk by chunk, its :class:`Judge` gathers them, and the answer goes on
without them unless the client asked for them itself. The wrapper sits below the HTTP
layer's endpoints, so the Responses and Messages translations are judged on the chat
answer they are built from, with no change of their own.

It offers no ``chat_stream_raw`` and no native Messages (its ``capabilities`` say so): a
judged stream is parsed chunk by chunk (the logprobs are in the chunks), which costs a
little more than the raw path; the last step of a cascade is never wrapped and keeps the
fast path. Everything else passes through to the wrapped backend.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from backends.base import Backend, Capabilities
from backends.wrapper import WrapperBackend
from gateway.protocol import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Completion,
    CompletionRequest,
)
from gateway.protocol.chat import ChatLogprobs
from policies import CascadeRule, confidence
from policies.confidence import argument_tokens


class Judge:
    """The token logprobs of one answer, gathered as it passes, and its confidence."""

    def __init__(self, rule: CascadeRule) -> None:
        self.rule = rule
        self.tokens: list[str] = []
        self.logprobs: list[float] = []
        self.tool_calls = False

    @property
    def count(self) -> int:
        """Tokens seen so far."""
        return len(self.logprobs)

    def enough(self) -> bool:
        """Whether a stream has shown the ``judge_tokens`` it is judged on (never, when it
        is judged whole: then the stream's end decides)."""
        limit = self.rule.judge_tokens
        return limit is not None and len(self.logprobs) >= limit

    def confidence(self) -> float | None:
        """The answer's confidence by the rule's scorer (a tool call: its argument values'
        tokens only); ``None`` when no token came with a logprob."""
        logprobs: Sequence[float] = self.logprobs
        if self.tool_calls and self.tokens:
            logprobs = [logprobs[i] for i in argument_tokens(self.tokens)]
        return confidence(logprobs, self.rule.scorer)

    def take_chat(self, logprobs: ChatLogprobs | None) -> None:
        """A chat choice's ``logprobs.content`` (whole or a chunk's share)."""
        if logprobs is None or not logprobs.content:
            return
        for item in logprobs.content:
            if isinstance(item, Mapping):
                self._take(item.get("token"), item.get("logprob"))

    def take_completion(self, logprobs: Any) -> None:
        """A text completion choice's ``logprobs`` (``tokens`` / ``token_logprobs``)."""
        if not isinstance(logprobs, Mapping):
            return
        tokens = logprobs.get("tokens") or []
        values = logprobs.get("token_logprobs") or []
        for token, value in zip(tokens, values, strict=False):
            self._take(token, value)

    def _take(self, token: object, value: object) -> None:
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            self.tokens.append(token if isinstance(token, str) else "")
            self.logprobs.append(min(float(value), 0.0))


class JudgedBackend(WrapperBackend):
    """``inner`` with every answer's logprobs going to ``judge`` (see the module doc)."""

    def __init__(self, inner: Backend, judge: Judge) -> None:
        super().__init__(inner)
        self.judge = judge

    @property
    def capabilities(self) -> Capabilities:
        return replace(self.inner.capabilities, chat_stream_raw=False, native_apis=frozenset())

    # the pass-through paths would carry the answer past the judge: refused, as by default
    chat_stream_raw = Backend.chat_stream_raw
    native = Backend.native
    native_stream = Backend.native_stream
    count_native_tokens = Backend.count_native_tokens

    async def chat(self, request: ChatCompletionRequest) -> ChatCompletion:
        """The whole answer, judged; its logprobs kept only if the client asked."""
        answer = await self.inner.chat(_asking_chat(request))
        for choice in answer.choices:
            self.judge.take_chat(choice.logprobs)
            self.judge.tool_calls = self.judge.tool_calls or bool(choice.message.tool_calls)
            if not request.logprobs:
                choice.logprobs = None
        return answer

    async def chat_stream(
        self, request: ChatCompletionRequest
    ) -> AsyncIterator[ChatCompletionChunk]:
        """The chunks, each judged as it passes."""
        judge, keep = self.judge, bool(request.logprobs)
        chunks = self.inner.chat_stream(_asking_chat(request))
        try:
            async for chunk in chunks:
                for choice in chunk.choices:
                    judge.take_chat(choice.logprobs)
                    judge.tool_calls = judge.tool_calls or bool(choice.delta.tool_calls)
                    if not keep:
                        choice.logprobs = None
                yield chunk
        finally:
            await _aclose(chunks)

    async def completion(self, request: CompletionRequest) -> Completion:
        """The whole text completion, judged."""
        answer = await self.inner.completion(_asking_completion(request))
        for choice in answer.choices:
            self.judge.take_completion(choice.logprobs)
            if request.logprobs is None:
                choice.logprobs = None
        return answer

    async def completion_stream(self, request: CompletionRequest) -> AsyncIterator[Completion]:
        """The text-completion chunks, each judged as it passes."""
        keep = request.logprobs is not None
        chunks = self.inner.completion_stream(_asking_completion(request))
        try:
            async for chunk in chunks:
                for choice in chunk.choices:
                    self.judge.take_completion(choice.logprobs)
                    if not keep:
                        choice.logprobs = None
                yield chunk
        finally:
            await _aclose(chunks)


def _asking_chat(request: ChatCompletionRequest) -> ChatCompletionRequest:
    if request.logprobs:
        return request
    return request.model_copy(update={"logprobs": True})


def _asking_completion(request: CompletionRequest) -> CompletionRequest:
    if request.logprobs is not None:
        return request
    return request.model_copy(update={"logprobs": 0})


async def _aclose(iterator: AsyncIterator[Any]) -> None:
    close = getattr(iterator, "aclose", None)
    if close is not None:
        await close()
