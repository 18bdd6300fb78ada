"""Google's Gemini API (AI Studio, an API key) behind the OpenAI chat contract, streaming
included, and Gemini's own requests passed through.

The translation lives in :mod:`backends.gemini.wire` (requests), :mod:`backends.gemini.answer`
(whole answers, usage) and :mod:`backends.gemini.stream` (stream events), thought
signatures in :mod:`backends.gemini.calls`, the pass-through in :mod:`backends.gemini.native`;
this module holds the HTTP calls. Gemini's errors (``{"error": {code, message, status,
details}}``) map by status through the backends' one table
(:func:`backends.http.errors.error_for_status`, which reads a ``RetryInfo.retryDelay`` as
retry-after and an invalid key's 400 as a rejected credential); an error sent as a stream
event maps by its ``code`` the same way.
"""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import aclosing
from typing import Any

from backends.base import Capabilities
from backends.gemini.answer import from_response
from backends.gemini.native import PassThrough, answer_usage, as_sent, count_body, total_tokens
from backends.gemini.settings import GeminiSettings
from backends.gemini.stream import StreamTranslator
from backends.gemini.wire import to_generate_request
from backends.http.backend import HTTPBackend
from backends.http.errors import annotate, cut_error, error_for_status, protocol_error
from backends.http.jsonbody import encode_json, load_json
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

__all__ = ["GeminiBackend", "GeminiSettings"]

NATIVE_API = "gemini"
CONTENT_PARTS = frozenset({"text", "image_url", "file", "input_audio"})


class GeminiBackend(HTTPBackend[GeminiSettings]):
    """A :class:`~backends.base.Backend` for chat over ``generateContent``; legacy
    completions are refused. Requests in Gemini's own form pass through
    (``capabilities.native_apis``)."""

    health_path = "v1beta/models"

    @functools.cached_property
    def capabilities(self) -> Capabilities:
        """Built once: the settings are frozen, and routing reads this per request."""
        s = self._settings
        return Capabilities(
            chat=True,
            completions=False,
            tools=s.tools,
            json_schema=s.json_schema,
            images=s.images,
            content_parts=CONTENT_PARTS,
            context_length=s.context_length,
            prefill=s.prefill,
            count_tokens=True,
            native_apis=frozenset({NATIVE_API}),
            messages_drop=frozenset(s.messages_drop),
            clamp_output=s.clamp_output,
        )

    def login_headers(self, key: str | None) -> dict[str, str]:
        return {"x-goog-api-key": key} if key else {}

    def probe_path(self) -> str:
        """A probe GETs the configured model (``models.get``) unless told otherwise."""
        return self._settings.health_path or f"{self._settings.api_version}/{self._model_name()}"

    def _method(self, method: str) -> str:
        """The path of one of the model's methods (``generateContent``...)."""
        return f"{self._settings.api_version}/{self._model_name()}:{method}"

    async def chat(self, request: ChatCompletionRequest) -> ChatCompletion:
        """One chat completion through ``generateContent``."""
        content = await self._post(self._method("generateContent"), self._to_wire(request))
        data = load_json(content, self.name)
        try:
            return from_response(data, request.model)
        except (KeyError, TypeError, AttributeError, ValueError):
            raise protocol_error(self.name, "sent a malformed answer") from None

    async def chat_stream(
        self, request: ChatCompletionRequest
    ) -> AsyncIterator[ChatCompletionChunk]:
        """Yield OpenAI chunks; the last has ``choices == []`` and ``usage``."""
        translator = StreamTranslator(request.model)
        events = self._events(self._to_wire(request))
        async with aclosing(events):
            async for event in events:
                try:
                    chunks = translator.feed(event)
                except (KeyError, TypeError, AttributeError, ValueError):
                    raise protocol_error(self.name, "sent a malformed event") from None
                for chunk in chunks:
                    yield chunk
        if not translator.finished:
            raise cut_error(self.name, "stream ended before a finishReason")
        yield translator.final()

    async def count_tokens(self, request: ChatCompletionRequest) -> int:
        """The prompt's tokens as ``countTokens`` counts them."""
        inner = {"model": self._model_name(), **self._to_wire(request)}
        body = encode_json({"generateContentRequest": inner})
        return await self._count(body)

    async def completion(self, request: CompletionRequest) -> Completion:
        """Refused: this backend serves chat only."""
        raise self._chat_only()

    async def completion_stream(self, request: CompletionRequest) -> AsyncIterator[Completion]:
        """Refused: this backend serves chat only."""
        raise self._chat_only()
        yield  # unreachable; makes this an async generator

    # --- Gemini as it is -----------------------------------------------------------------

    async def native(
        self, api: str, body: bytes, headers: Mapping[str, str] | None = None
    ) -> tuple[bytes, Usage]:
        """The upstream's ``GenerateContentResponse`` for ``body`` (the client's bytes),
        as it sent it, and its usage."""
        self._speaks(api)
        sent = as_sent(body, self._upstream_model(), self._settings.missing_signature)
        content = await self._post(self._method("generateContent"), sent, headers)
        return content, answer_usage(content, self.name)

    def native_stream(
        self, api: str, body: bytes, headers: Mapping[str, str] | None = None
    ) -> PassThrough:
        """The upstream's events for ``body`` (as :meth:`native` sends it) from
        ``streamGenerateContent?alt=sse``, as it sent them."""
        self._speaks(api)
        sent = as_sent(body, self._upstream_model(), self._settings.missing_signature)
        opened = self.post_stream(self._method("streamGenerateContent?alt=sse"), sent, headers)
        return PassThrough(opened, self.name, self._event_error)

    async def count_native_tokens(
        self, api: str, body: bytes, headers: Mapping[str, str] | None = None
    ) -> int:
        """The upstream's own ``countTokens`` for ``body`` (a ``countTokens`` or a
        ``generateContent`` request)."""
        self._speaks(api)
        return await self._count(count_body(body, self._upstream_model()), headers)

    def _speaks(self, api: str) -> None:
        if api != NATIVE_API:
            raise self.not_supported(f"native {api} requests")

    # --- wire ----------------------------------------------------------------------------

    def _upstream_model(self) -> str:
        """The configured model without the ``models/`` its resource name starts with."""
        return self._settings.model.removeprefix("models/")

    def _model_name(self) -> str:
        return f"models/{self._upstream_model()}"

    def _to_wire(self, request: ChatCompletionRequest) -> dict[str, Any]:
        try:
            return to_generate_request(request, self._settings)
        except InvalidRequestError as exc:
            raise annotate(exc, counts_as_failure=False) from None

    async def _count(self, body: bytes, headers: Mapping[str, str] | None = None) -> int:
        upstream = self._require_upstream()
        total_s = self._settings.timeouts.total_s
        content = await upstream.post(self._method("countTokens"), body, total_s, headers)
        return total_tokens(content, self.name)

    def _event_error(self, event: dict[str, Any]) -> GatewayError:
        """An ``{"error": {...}}`` event in a stream, mapped by its ``code`` (else 500)."""
        error = event.get("error")
        code = error.get("code") if isinstance(error, dict) else None
        status = code if isinstance(code, int) and 400 <= code < 600 else 500
        return error_for_status(self.name, status, json.dumps(event), {}, self._redactor())

    def _chat_only(self) -> GatewayError:
        exc = InvalidRequestError(
            f"deployment {self.name} serves chat only; use /v1/chat/completions"
        )
        return annotate(exc, counts_as_failure=False)

    async def _events(self, body: dict[str, Any]) -> AsyncGenerator[dict[str, Any], None]:
        """Yield decoded stream events up to the end of the body; an error event raises."""
        path = self._method("streamGenerateContent?alt=sse")
        async with self.post_stream(path, body) as frames:
            async for batch in frames:
                for frame in batch:
                    _, data = parse_event(frame)
                    if not data:
                        continue
                    event = load_json(data, self.name)
                    if not isinstance(event, dict):
                        raise protocol_error(self.name, "sent an event that is not an object")
                    if "error" in event:
                        raise self._event_error(event)
                    yield event
