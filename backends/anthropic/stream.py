"""Anthropic Messages stream events → OpenAI chat chunks.

``message_start`` gives the first chunk (role), text deltas become ``content`` deltas, a
``tool_use`` block start becomes a ``tool_calls[i]`` delta carrying ``id``, ``type`` and
``name`` (arguments ``""``), its ``input_json_delta`` pieces become ``arguments`` deltas of
the same ``i``, ``message_delta`` gives the ``finish_reason`` chunk, and :meth:`final`
gives the usage chunk (``choices: []``) that ends every stream. Every chunk carries the
model name the translator was made with (the public one), not the upstream's.

A ``message_delta`` with a ``stop_reason`` finishes the message (:func:`ends_message`): a
stream that ends there without ``message_stop`` is whole, not cut.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.protocol import ChatCompletionChunk, ChoiceDelta, ChunkChoice, ToolCallDelta, now
from gateway.protocol.common import FinishReason
from gateway.protocol.messages_codec import chat_usage, finish_reason

_Handler = Callable[["StreamTranslator", dict[str, Any]], "ChatCompletionChunk | None"]


class StreamTranslator:
    """Feed it each decoded event in order; it returns the chunk to send, if any."""

    def __init__(self, model: str) -> None:
        """``model``: the name every chunk carries (what the client asked for)."""
        self.id = ""
        self.model = model
        self.created = now()
        self._tools: dict[int, int] = {}
        self._usage: dict[str, Any] = {}

    def feed(self, event: dict[str, Any]) -> ChatCompletionChunk | None:
        """The chunk for one event (``KeyError``/``TypeError`` if it is malformed)."""
        handler = _HANDLERS.get(event.get("type", ""))
        return handler(self, event) if handler is not None else None

    def final(self) -> ChatCompletionChunk:
        """The last chunk: no choices, the usage of the whole message."""
        return ChatCompletionChunk(
            id=self.id,
            created=self.created,
            model=self.model,
            choices=[],
            usage=chat_usage(self._usage),
        )

    def _chunk(self, delta: ChoiceDelta, finish: FinishReason | None = None) -> ChatCompletionChunk:
        choice = ChunkChoice(delta=delta, finish_reason=finish)
        return ChatCompletionChunk(
            id=self.id, created=self.created, model=self.model, choices=[choice]
        )

    def _message_start(self, event: dict[str, Any]) -> ChatCompletionChunk:
        message = event["message"]
        self.id = message["id"]
        self._usage.update(message.get("usage") or {})
        return self._chunk(ChoiceDelta(role="assistant", content=""))

    def _block_start(self, event: dict[str, Any]) -> ChatCompletionChunk | None:
        block = event["content_block"]
        if block["type"] == "text" and block.get("text"):
            return self._chunk(ChoiceDelta(content=block["text"]))
        if block["type"] != "tool_use":
            return None
        index = self._tools[event["index"]] = len(self._tools)
        function = {"name": block["name"], "arguments": ""}
        call = ToolCallDelta(index=index, id=block["id"], type="function", function=function)
        return self._chunk(ChoiceDelta(tool_calls=[call]))

    def _block_delta(self, event: dict[str, Any]) -> ChatCompletionChunk | None:
        delta = event["delta"]
        kind = delta["type"]
        if kind == "text_delta":
            return self._chunk(ChoiceDelta(content=delta["text"]))
        if kind == "input_json_delta":
            if not delta["partial_json"]:
                return None
            index = self._tools[event["index"]]
            call = ToolCallDelta(index=index, function={"arguments": delta["partial_json"]})
            return self._chunk(ChoiceDelta(tool_calls=[call]))
        if kind == "thinking_delta":
            return self._chunk(ChoiceDelta(reasoning_content=delta["thinking"]))
        return None

    def _message_delta(self, event: dict[str, Any]) -> ChatCompletionChunk:
        usage = event.get("usage") or {}
        self._usage.update({key: value for key, value in usage.items() if value is not None})
        stop = finish_reason(event["delta"].get("stop_reason")) or "stop"
        return self._chunk(ChoiceDelta(), stop)


def ends_message(event: dict[str, Any]) -> bool:
    """Whether ``event`` finishes the message: a ``message_delta`` with a ``stop_reason``
    (``message_stop`` only marks the end of the stream after it)."""
    if event.get("type") != "message_delta":
        return False
    delta = event.get("delta")
    return isinstance(delta, dict) and delta.get("stop_reason") is not None


_HANDLERS: dict[str, _Handler] = {
    "message_start": StreamTranslator._message_start,
    "content_block_start": StreamTranslator._block_start,
    "content_block_delta": StreamTranslator._block_delta,
    "message_delta": StreamTranslator._message_delta,
}
