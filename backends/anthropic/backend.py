"""Anthropic's Messages API behind the OpenAI chat contract, streaming included.

The translation lives in :mod:`backends.anthropic.wire` (requests and whole answers) and
:mod:`backends.anthropic.stream` (stream events); this module holds the settings, the
HTTP calls and the error mapping. Anthropic errors (``{"type": "error", "error": {type,
message}}``) map by status as every upstream's do (:func:`backends.http.errors.error_for_status`),
with 529 ``overloaded_error`` → 503 + retry-after; errors sent as stream events map by
their type through the same table.
"""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import AbstractContextManager, aclosing
from typing import Any, Literal

import httpx
from pydantic import Field

from backends.anthropic.native import NativeMessages
from backends.anthropic.stream import StreamTranslator, ends_message
from backends.anthropic.wire import from_message, to_messages_request
from backends.base import Backend, Capabilities, LiveStats, continues_final
from backends.http.errors import (
    annotate,
    cut_error,
    error_for_status,
    map_transport_errors,
    protocol_error,
)
from backends.http.jsonbody import encode_json, load_json
from backends.http.redact import Redactor
from backends.http.settings import HTTPDeploymentSettings, read_api_key
from backends.http.sse import parse_event
from backends.http.upstream import Upstream, make_upstream, probe
from gateway.errors import GatewayError, InvalidRequestError
from gateway.protocol import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Completion,
    CompletionRequest,
)
from gateway.protocol.messages import error_status

MESSAGES_PATH = "v1/messages"


class AnthropicSettings(HTTPDeploymentSettings):
    """One deployment behind Anthropic's Messages API (or a server that speaks it)."""

    backend: Literal["anthropic"]
    base_url: str = "https://api.anthropic.com"
    api_key_env: str | None = "ANTHROPIC_API_KEY"
    anthropic_version: str = "2023-06-01"
    default_max_tokens: int = Field(default=4096, ge=1)
    tools: bool = True
    images: bool = True
    prefill: bool = Field(
        default=True,
        description=(
            "the model continues a last assistant turn; false for models that refuse "
            "prefill (a resumed stream then continues through a user turn)"
        ),
    )


class AnthropicBackend(NativeMessages, Backend):
    """A :class:`~backends.base.Backend` for chat; legacy completions are refused. Requests
    in Messages form pass through untouched (:class:`~backends.anthropic.native.NativeMessages`)."""

    def __init__(
        self, settings: AnthropicSettings, *, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self._settings = settings
        self._transport = transport
        self._upstream: Upstream | None = None
        self._in_flight = 0

    @property
    def name(self) -> str:
        return self._settings.name

    @property
    def settings(self) -> AnthropicSettings:
        return self._settings

    @functools.cached_property
    def capabilities(self) -> Capabilities:
        """Built once: the settings are frozen, and routing reads this per request."""
        s = self._settings
        return Capabilities(
            chat=True,
            completions=False,
            embeddings=False,
            tools=s.tools,
            json_schema=False,
            images=s.images,
            context_length=s.context_length,
            prefill=s.prefill,
            native_messages=True,
        )

    async def start(self) -> None:
        """Read the API key and open the connection pool."""
        if self._upstream is not None:
            return
        headers = {"anthropic-version": self._settings.anthropic_version}
        key = read_api_key(self._settings.api_key_env)
        if key:
            headers["x-api-key"] = key
        self._upstream = make_upstream(self._settings, headers, self._transport)

    async def aclose(self) -> None:
        """Close the pool; streams still open are cut."""
        upstream, self._upstream = self._upstream, None
        if upstream is not None:
            await upstream.aclose()

    def stats(self) -> LiveStats:
        return LiveStats(in_flight=self._in_flight)

    async def health(self, timeout_s: float) -> bool | None:
        """A background probe while the breaker is open: ``GET health_path`` (default
        ``v1/models``); ``None`` when probes are off or the upstream cannot tell."""
        if self._upstream is None or not self._settings.health_check:
            return None
        return await probe(self._upstream, self._settings.health_path or "v1/models", timeout_s)

    async def chat(self, request: ChatCompletionRequest) -> ChatCompletion:
        """One chat completion through ``POST /v1/messages``."""
        body = encode_json(self._to_wire(request, stream=False))
        upstream = self._require_upstream()
        self._in_flight += 1
        try:
            content = await upstream.post(MESSAGES_PATH, body, self._settings.timeouts.total_s)
        finally:
            self._in_flight -= 1
        result = self._from_wire(content)
        result.model = request.model  # the public name; the upstream's is the deployment's
        return result

    async def chat_stream(
        self, request: ChatCompletionRequest
    ) -> AsyncIterator[ChatCompletionChunk]:
        """Yield OpenAI chunks; the last has ``choices == []`` and ``usage``."""
        translator = StreamTranslator(request.model)
        body = self._to_wire(request, stream=True)
        # Anthropic refuses a last assistant turn that ends in whitespace: it goes without,
        # and the answer's first text loses the same whitespace should it repeat it
        dropped = _strip_prefill(body) if continues_final(request) else ""
        events = self._events(body)
        async with aclosing(events):
            async for event in events:
                try:
                    chunk = translator.feed(event)
                except (KeyError, TypeError, AttributeError):
                    raise protocol_error(
                        self.name, f"sent a malformed {event.get('type')}"
                    ) from None
                if chunk is not None:
                    if dropped and chunk.choices and chunk.choices[0].delta.content:
                        delta = chunk.choices[0].delta
                        delta.content, dropped = _without(delta.content or "", dropped), ""
                    yield chunk
        yield translator.final()

    async def completion(self, request: CompletionRequest) -> Completion:
        """Refused: this backend serves chat only."""
        raise self._chat_only()

    async def completion_stream(self, request: CompletionRequest) -> AsyncIterator[Completion]:
        """Refused: this backend serves chat only."""
        raise self._chat_only()
        yield  # unreachable; makes this an async generator

    # --- wire ----------------------------------------------------------------------------

    def _to_wire(self, request: ChatCompletionRequest, *, stream: bool) -> dict[str, Any]:
        s = self._settings
        try:
            return to_messages_request(
                request, model=s.model, default_max_tokens=s.default_max_tokens, stream=stream
            )
        except InvalidRequestError as exc:
            raise annotate(exc, counts_as_failure=False) from None

    def _from_wire(self, content: bytes) -> ChatCompletion:
        data = load_json(content, self.name)
        try:
            return from_message(data)
        except (KeyError, TypeError, AttributeError, ValueError):
            raise protocol_error(self.name, "sent a malformed message") from None

    def _map_errors(self) -> AbstractContextManager[None]:
        """Transport failures (connect, timeout, reset) onto gateway.errors."""
        return map_transport_errors(self.name, self._redactor())

    def _redactor(self) -> Redactor:
        return self._upstream.redactor if self._upstream is not None else Redactor()

    def _event_error(self, event: dict[str, Any]) -> GatewayError:
        """An ``error`` event in a stream, mapped by its type (overloaded → 503)."""
        error = event.get("error")
        kind = error.get("type") if isinstance(error, dict) else None
        status = error_status(kind or "")
        return error_for_status(self.name, status, json.dumps(event), {}, self._redactor())

    def _chat_only(self) -> GatewayError:
        exc = InvalidRequestError(
            f"deployment {self.name} serves chat only; use /v1/chat/completions"
        )
        return annotate(exc, counts_as_failure=False)

    def _require_upstream(self) -> Upstream:
        if self._upstream is None:
            raise RuntimeError(f"backend {self.name} is not started")
        return self._upstream

    async def _events(self, body: dict[str, Any]) -> AsyncGenerator[dict[str, Any], None]:
        """Yield decoded stream events up to ``message_stop``, or up to the end of a body
        whose message finished (:func:`ends_message`); a stream cut before that raises."""
        upstream = self._require_upstream()
        self._in_flight += 1
        finished = False
        try:
            with self._map_errors():
                async with upstream.stream(
                    MESSAGES_PATH, encode_json(body), self._settings.timeouts
                ) as frames:
                    async for batch in frames:
                        for frame in batch:
                            _, data = parse_event(frame)
                            if not data:
                                continue
                            event = load_json(data, self.name)
                            kind = event.get("type") if isinstance(event, dict) else None
                            if kind == "error":
                                raise self._event_error(event)
                            if kind == "message_stop":
                                await frames.finish()
                                return
                            if kind is not None:
                                finished = finished or ends_message(event)
                                yield event
            if not finished:
                raise cut_error(self.name, "stream ended before message_stop")
        finally:
            self._in_flight -= 1


def _strip_prefill(body: dict[str, Any]) -> str:
    """Take the trailing whitespace off the last (assistant) turn's text; what was taken."""
    messages = body.get("messages") or []
    if not messages or messages[-1].get("role") != "assistant":
        return ""
    blocks = messages[-1]["content"]
    last = blocks[-1] if blocks else None
    if not isinstance(last, dict) or last.get("type") != "text":
        return ""
    text: str = last["text"]
    kept = text.rstrip()
    if kept:
        last["text"] = kept
    else:  # nothing but whitespace: no text block at all (Anthropic refuses an empty one)
        blocks.pop()
        if not blocks:
            messages.pop()
    return text[len(kept) :]


def _without(text: str, whitespace: str) -> str:
    """``text`` less the start it shares with ``whitespace`` (already sent)."""
    same = 0
    while same < min(len(text), len(whitespace)) and text[same] == whitespace[same]:
        same += 1
    return text[same:]
