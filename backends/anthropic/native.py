"""Anthropic's Messages API as it is: the pass-through behind the gateway's ``/v1/messages``.

A client that speaks Messages to a deployment that speaks Messages gets no translation:
the request goes up as the client wrote it (the deployment's ``model`` set), and the answer
or the stream's events come back byte for byte. Only what the gateway itself needs is read
on the way: the usage (``message_start`` and ``message_delta``), errors sent as events
(mapped as the chat path maps them, so a failure before the first event still falls back)
and the end (``message_stop``, or a body that ends after the message finished).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from backends.anthropic.stream import ends_message
from backends.http.errors import cut_error, protocol_error
from backends.http.jsonbody import load_json
from backends.http.sse import FrameBatches, parse_event
from gateway.errors import GatewayError
from gateway.protocol import Usage
from gateway.protocol.messages_codec import chat_usage

_READ = frozenset({"message_start", "message_delta", "error"})


def answer_usage(content: bytes, deployment: str) -> Usage:
    """The usage of a whole ``message`` as the upstream sent it."""
    data = load_json(content, deployment)
    usage = data.get("usage") if isinstance(data, dict) else None
    if not isinstance(usage, dict):
        raise protocol_error(deployment, "sent a message without usage")
    return chat_usage(usage)


def input_tokens(content: bytes, deployment: str) -> int:
    """The count in a ``count_tokens`` answer."""
    data = load_json(content, deployment)
    tokens = data.get("input_tokens") if isinstance(data, dict) else None
    if not isinstance(tokens, int):
        raise protocol_error(deployment, "sent a token count without input_tokens")
    return tokens


class PassThrough:
    """A :class:`~gateway.protocol.frames.FrameStream` of an upstream's Messages events."""

    def __init__(
        self,
        opened: AbstractAsyncContextManager[FrameBatches],
        deployment: str,
        event_error: Callable[[dict[str, Any]], GatewayError],
    ) -> None:
        """``opened``: the upstream's stream once entered; ``event_error``: the error an
        ``error`` event stands for."""
        self._deployment = deployment
        self._event_error = event_error
        self._frames = self._run(opened)
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

    async def _run(
        self, opened: AbstractAsyncContextManager[FrameBatches]
    ) -> AsyncGenerator[bytes, None]:
        finished = False
        async with opened as frames:
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
            raise cut_error(self._deployment, "stream ended before message_stop")

    def _read(self, frame: bytes) -> str | None:
        """The event's type (``None``: nothing to pass on); usage and errors are read."""
        event, data = parse_event(frame)
        if not data:
            return None
        if event is not None and event not in _READ:
            return event
        payload = load_json(data, self._deployment)
        if not isinstance(payload, dict):
            raise protocol_error(self._deployment, "sent an event that is not an object")
        kind = payload.get("type")
        if kind == "error":
            raise self._event_error(payload)
        if kind == "message_start":
            self._usage.update((payload.get("message") or {}).get("usage") or {})
        elif kind == "message_delta":
            usage = payload.get("usage") or {}
            self._usage.update({k: v for k, v in usage.items() if v is not None})
            if ends_message(payload):
                return "message_delta+stop"
        return str(kind or event or "")
