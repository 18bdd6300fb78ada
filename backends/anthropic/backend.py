"""Anthropic's Messages API behind the OpenAI chat contract, streaming included.

The translation lives in :mod:`backends.anthropic.wire` (requests and whole answers) and
:mod:`backends.anthropic.stream` (stream events), the settings in
:mod:`backends.anthropic.settings` and the Messages pass-through's stream in
:mod:`backends.anthropic.native`; this module holds the HTTP calls and the error mapping.
Anthropic errors (``{"type": "error", "error": {type, message}}``) map by status as every
upstream's do (:func:`backends.http.errors.error_for_status`), with 529
``overloaded_error`` → 503 + retry-after; errors sent as stream events map by their type
through the same table.
"""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import aclosing
from typing import Any

from backends.anthropic.native import PassThrough, answer_usage, input_tokens
from backends.anthropic.settings import AnthropicSettings
from backends.anthropic.stream import StreamTranslator, ends_message
from backends.anthropic.wire import from_message, to_messages_request
from backends.base import Capabilities, continues_final
from backends.http.backend import HTTPBackend
from backends.http.errors import annotate, cut_error, error_for_status, protocol_error
from backends.http.jsonbody import load_json
from backends.http.sse import parse_event
from gateway.errors import GatewayError, InvalidRequestError
from gateway.protocol import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Completion,
    CompletionRequest,
    Usage,
)
from gateway.protocol.messages import error_status
from gateway.protocol.rawbody import RawBody

__all__ = ["AnthropicBackend", "AnthropicSettings"]

NATIVE_API = "messages"
MESSAGES_PATH = "v1/messages"
COUNT_TOKENS_PATH = "v1/messages/count_tokens"


class AnthropicBackend(HTTPBackend[AnthropicSettings]):
    """A :class:`~backends.base.Backend` for chat; legacy completions are refused. Requests
    in Messages form pass through untouched (``capabilities.native_apis``, see
    :mod:`backends.anthropic.native`)."""

    health_path = "v1/models"

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
            native_apis=frozenset({NATIVE_API}),
        )

    def login_headers(self, key: str | None) -> dict[str, str]:
        headers = {"anthropic-version": self._settings.anthropic_version}
        if key:
            headers["x-api-key"] = key
        return headers

    async def chat(self, request: ChatCompletionRequest) -> ChatCompletion:
        """One chat completion through ``POST /v1/messages``."""
        content = await self._post(MESSAGES_PATH, self._to_wire(request, stream=False))
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

    # --- Messages as they are ------------------------------------------------------------

    async def native(
        self, api: str, body: bytes, headers: Mapping[str, str] | None = None
    ) -> tuple[bytes, Usage]:
        """The upstream's ``message`` for ``body`` (the client's bytes, the deployment's
        ``model`` set), as it sent it, and its usage."""
        self._speaks(api)
        content = await self._post(MESSAGES_PATH, self._as_sent(body), headers)
        return content, answer_usage(content, self.name)

    def native_stream(
        self, api: str, body: bytes, headers: Mapping[str, str] | None = None
    ) -> PassThrough:
        """The upstream's events for ``body`` (as :meth:`native` sends it, ``stream:
        true``), as it sent them, up to ``message_stop``."""
        self._speaks(api)
        sent = self._as_sent(body, stream=True)
        opened = self.post_stream(MESSAGES_PATH, sent, headers)
        return PassThrough(opened, self.name, self._event_error)

    async def count_native_tokens(
        self, api: str, body: bytes, headers: Mapping[str, str] | None = None
    ) -> int:
        """The upstream's own ``count_tokens`` for ``body``."""
        self._speaks(api)
        upstream = self._require_upstream()
        total_s = self._settings.timeouts.total_s
        content = await upstream.post(COUNT_TOKENS_PATH, self._as_sent(body), total_s, headers)
        return input_tokens(content, self.name)

    def _speaks(self, api: str) -> None:
        if api != NATIVE_API:
            raise self.not_supported(f"native {api} requests")

    def _as_sent(self, body: bytes, *, stream: bool = False) -> bytes:
        """``body`` byte for byte, but for ``model`` (and ``stream`` when it must be set)."""
        raw = RawBody.read(body)
        changes: dict[str, Any] = {"model": self._settings.model}
        if stream and raw.data.get("stream") is not True:
            changes["stream"] = True
        if raw.data.get("model") == self._settings.model and len(changes) == 1:
            return body
        return raw.spliced(changes)

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

    async def _events(self, body: dict[str, Any]) -> AsyncGenerator[dict[str, Any], None]:
        """Yield decoded stream events up to ``message_stop``, or up to the end of a body
        whose message finished (:func:`ends_message`); a stream cut before that raises."""
        finished = False
        async with self.post_stream(MESSAGES_PATH, body) as frames:
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
