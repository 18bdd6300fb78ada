"""Chat chunks → Anthropic's Messages stream events.

``message_start`` (then one ``ping``); per run of reasoning (``reasoning_content``)
``content_block_start`` (a ``thinking`` block), ``content_block_delta``
(``thinking_delta``)..., then a ``signature_delta`` (empty: only Anthropic signs) and
``content_block_stop``; per text run ``content_block_start`` (a ``text``
block), ``content_block_delta`` (``text_delta``)..., ``content_block_stop``; per tool
call ``content_block_start`` (a ``tool_use`` block, ``input: {}``), ``content_block_delta``
(``input_json_delta``)..., ``content_block_stop``; then ``message_delta`` with the
``stop_reason`` and the usage, and ``message_stop``. A failure after the first byte is an
``event: error`` frame, as Anthropic sends it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from gateway.errors import GatewayError
from gateway.protocol import ChatCompletionChunk, ToolCallDelta, item_id
from gateway.protocol.messages import anthropic_status, error_body
from gateway.protocol.messages_codec import message_usage, stop_reason
from gateway.protocol.translate import ChunkTranslator, sse

_PING = sse("ping", {"type": "ping"})


class MessageEvents(ChunkTranslator):
    """The Messages events of one answer."""

    def __init__(self, chunks: AsyncIterator[ChatCompletionChunk], model: str) -> None:
        super().__init__(chunks)
        self._id = item_id("msg")
        self._model = model
        self._block = -1  # index of the open content block, -1 when none is open
        self._open: str | None = None  # "text", or the chat tool index of the open tool_use
        self._finish: str | None = None
        self._stop: str | None = None

    def opening(self) -> list[bytes]:
        message: dict[str, Any] = {
            "id": self._id,
            "type": "message",
            "role": "assistant",
            "model": self.model or self._model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        return [sse("message_start", {"type": "message_start", "message": message}), _PING]

    def feed(self, chunk: ChatCompletionChunk) -> list[bytes]:
        choice = chunk.choices[0]
        delta, frames = choice.delta, []
        if delta.reasoning_content:
            if self._open != "thinking":
                frames.extend(self._start({"type": "thinking", "thinking": ""}, "thinking"))
            frames.append(
                self._delta({"type": "thinking_delta", "thinking": delta.reasoning_content})
            )
        if delta.content:
            if self._open != "text":
                frames.extend(self._start({"type": "text", "text": ""}, "text"))
            frames.append(self._delta({"type": "text_delta", "text": delta.content}))
        for piece in delta.tool_calls or ():
            frames.extend(self._tool(piece))
        if choice.finish_reason is not None:
            self._finish = choice.finish_reason
            matched = (choice.model_extra or {}).get("stop_reason")
            self._stop = matched if isinstance(matched, str) else None
        return frames

    async def closing(self) -> list[bytes]:
        frames = self._stop_block()
        reason: str = stop_reason(self._finish)
        sequence = self._stop if reason == "end_turn" else None
        if sequence is not None:
            reason = "stop_sequence"
        usage = message_usage(self.usage).model_dump()
        delta = {"stop_reason": reason, "stop_sequence": sequence}
        frames.append(
            sse("message_delta", {"type": "message_delta", "delta": delta, "usage": usage})
        )
        frames.append(sse("message_stop", {"type": "message_stop"}))
        return frames

    def failed(self, error: GatewayError) -> bytes:
        return sse("error", error_body(anthropic_status(error.status_code), error.message))

    def _tool(self, piece: ToolCallDelta) -> list[bytes]:
        frames: list[bytes] = []
        function = piece.function or {}
        key = f"tool:{piece.index}"
        if self._open != key:
            block = {
                "type": "tool_use",
                "id": piece.id or item_id("toolu"),
                "name": function.get("name", ""),
                "input": {},
            }
            frames.extend(self._start(block, key))
        arguments = function.get("arguments")
        if arguments:
            frames.append(self._delta({"type": "input_json_delta", "partial_json": arguments}))
        return frames

    def _start(self, block: dict[str, Any], key: str) -> list[bytes]:
        frames = self._stop_block()
        self._block += 1
        self._open = key
        start = {"type": "content_block_start", "index": self._block, "content_block": block}
        frames.append(sse("content_block_start", start))
        return frames

    def _delta(self, delta: dict[str, Any]) -> bytes:
        data = {"type": "content_block_delta", "index": self._block, "delta": delta}
        return sse("content_block_delta", data)

    def _stop_block(self) -> list[bytes]:
        if self._open is None:
            return []
        frames = []
        if self._open == "thinking":
            frames.append(self._delta({"type": "signature_delta", "signature": ""}))
        self._open = None
        data = {"type": "content_block_stop", "index": self._block}
        frames.append(sse("content_block_stop", data))
        return frames
