"""Anthropic's Messages API as it is: the pass-through behind the gateway's ``/v1/messages``.

A client that speaks Messages to a deployment that speaks Messages gets no translation:
the request goes up as the client wrote it (the deployment's ``model`` set), and the answer
or the stream's events come back byte for byte. Only what the gateway itself needs is read
on the way: the usage (``message_start`` and ``message_delta``), errors sent as events
(mapped as the chat path maps them, so a failure before the first event still falls back)
and the end (``message_stop``, or a body that ends after the message finished).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

from backends.anthropic.stream import ends_message
from backends.http.errors import cut_error, map_transport_errors, protocol_error
from backends.http.jsonbody import encode_json, load_json
from backends.http.sse import parse_event
from gateway.errors import GatewayError
from gateway.protocol import Usage
from gateway.protocol.messages_codec import chat_usage

if TYPE_CHECKING:
    from backends.anthropic.backend import AnthropicSettings
    from backends.http.redact import Redactor
    from backends.http.upstream import Upstream

MESSAGES_PATH = "v1/messages"
COUNT_TOKENS_PATH = "v1/messages/count_tokens"
_READ = frozenset({"message_start", "message_delta", "error"})


class NativeMessages:
    """The Messages pass-through of :class:`~backends.anthropic.backend.AnthropicBackend`."""

    if TYPE_CHECKING:
        _settings: AnthropicSettings
        _in_flight: int

        @property
        def name(self) -> str: ...

        def _require_upstream(self) -> Upstream: ...

        def _redactor(self) -> Redactor: ...

        def _event_error(self, event: dict[str, Any]) -> GatewayError: ...

    async def messages(self, body: dict[str, Any]) -> tuple[bytes, Usage]:
        """The upstream's ``message`` for ``body`` as it sent it, and its usage."""
        upstream = self._require_upstream()
        payload = encode_json({**body, "model": self._settings.model})
        self._in_flight += 1
        try:
            content = await upstream.post(MESSAGES_PATH, payload, self._settings.timeouts.total_s)
        finally:
            self._in_flight -= 1
        data = load_json(content, self.name)
        usage = data.get("usage") if isinstance(data, dict) else None
        if not isinstance(usage, dict):
            raise protocol_error(self.name, "sent a message without usage")
        return content, chat_usage(usage)

    def messages_stream(self, body: dict[str, Any]) -> PassThrough:
        """The upstream's events for ``body``, as it sent them, up to ``message_stop``."""
        return PassThrough(self, {**body, "model": self._settings.model, "stream": True})

    async def count_message_tokens(self, body: dict[str, Any]) -> int:
        """The upstream's own ``count_tokens`` for ``body``."""
        upstream = self._require_upstream()
        payload = encode_json({**body, "model": self._settings.model})
        content = await upstream.post(COUNT_TOKENS_PATH, payload, self._settings.timeouts.total_s)
        data = load_json(content, self.name)
        tokens = data.get("input_tokens") if isinstance(data, dict) else None
        if not isinstance(tokens, int):
            raise protocol_error(self.name, "sent a token count without input_tokens")
        return tokens


class PassThrough:
    """A :class:`~gateway.protocol.frames.FrameStream` of an upstream's Messages events."""

    def __init__(self, backend: NativeMessages, body: dict[str, Any]) -> None:
        self._backend = backend
        self._frames = self._run(body)
        self._usage: dict[str, Any] = {}
        self.usage_frame: bytes | None = None

    @property
    def usage(self) -> Usage | None:
        return chat_usage(self._usage) if self._usage else None

    def __aiter__(self) -> PassThrough:
        return self

    async def __anext__(self) -> bytes:
        return await anext(self._frames)

    async def aclose(self) -> None:
        await self._frames.aclose()

    async def _run(self, body: dict[str, Any]) -> AsyncGenerator[bytes, None]:
        backend = self._backend
        upstream = backend._require_upstream()
        name, finished = backend.name, False
        backend._in_flight += 1
        try:
            with map_transport_errors(name, backend._redactor()):
                async with upstream.stream(
                    MESSAGES_PATH, encode_json(body), backend._settings.timeouts
                ) as frames:
                    async for batch in frames:
                        out: list[bytes] = []
                        for frame in batch:
                            kind = self._read(frame)
                            if kind is None:
                                continue
                            out.append(frame + b"\n\n")
                            finished = finished or kind == "message_delta+stop"
                            if kind == "message_stop":
                                yield b"".join(out)
                                await frames.finish()
                                return
                        if out:
                            yield b"".join(out)
            if not finished:
                raise cut_error(name, "stream ended before message_stop")
        finally:
            backend._in_flight -= 1

    def _read(self, frame: bytes) -> str | None:
        """The event's type (``None``: nothing to pass on); usage and errors are read."""
        event, data = parse_event(frame)
        if not data:
            return None
        if event is not None and event not in _READ:
            return event
        payload = load_json(data, self._backend.name)
        if not isinstance(payload, dict):
            raise protocol_error(self._backend.name, "sent an event that is not an object")
        kind = payload.get("type")
        if kind == "error":
            raise self._backend._event_error(payload)
        if kind == "message_start":
            self._usage.update((payload.get("message") or {}).get("usage") or {})
        elif kind == "message_delta":
            usage = payload.get("usage") or {}
            self._usage.update({k: v for k, v in usage.items() if v is not None})
            if ends_message(payload):
                return "message_delta+stop"
        return str(kind or event or "")
