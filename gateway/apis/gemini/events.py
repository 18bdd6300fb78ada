"""Chat chunks → Gemini's ``streamGenerateContent`` stream.

Each chunk with text (or reasoning, shown as ``thought`` parts when asked for) becomes one
``GenerateContentResponse`` whose candidate holds that piece; tool calls are gathered and
go whole, as Gemini sends a ``functionCall``, in the last response, which also says the
``finishReason`` and the ``usageMetadata``. With ``?alt=sse`` each response is one
server-sent event (``data: {...}`` and a blank line, as Google writes them); without it
the responses are the elements of one JSON array, written as they come. A failure after
the first byte is an ``{"error": ...}`` object in the same framing.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from gateway.apis.gemini.answer import finish_reason, function_call, usage_metadata
from gateway.protocol import ChatCompletionChunk, new_id
from gateway.protocol.translate import ChunkTranslator


class Framing:
    """How one stream's responses are written: SSE events, or one JSON array's elements."""

    def __init__(self, sse: bool) -> None:
        self.sse = sse
        self._first = True

    def frame(self, data: dict[str, Any]) -> bytes:
        payload = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()
        if self.sse:
            return b"data: " + payload + b"\r\n\r\n"
        lead = b"[" if self._first else b",\r\n"
        self._first = False
        return lead + payload

    def end(self) -> bytes:
        if self.sse:
            return b""
        return b"[]" if self._first else b"]"


class GeminiEvents(ChunkTranslator):
    """The stream of one answer."""

    def __init__(
        self,
        chunks: AsyncIterator[ChatCompletionChunk],
        model: str,
        framing: Framing,
        thoughts: bool,
    ) -> None:
        super().__init__(chunks)
        self._model = model
        self._framing = framing
        self._thoughts = thoughts
        self._id = new_id("resp")
        self._calls: dict[int, dict[str, str]] = {}
        self._finish: str | None = None

    def feed(self, chunk: ChatCompletionChunk) -> list[bytes]:
        choice = chunk.choices[0]
        delta = choice.delta
        parts: list[dict[str, Any]] = []
        if delta.reasoning_content and self._thoughts:
            parts.append({"text": delta.reasoning_content, "thought": True})
        if delta.content:
            parts.append({"text": delta.content})
        for piece in delta.tool_calls or ():
            held = self._calls.setdefault(piece.index, {"id": "", "name": "", "arguments": ""})
            function = piece.function or {}
            held["id"] = piece.id or held["id"]
            held["name"] += function.get("name", "")
            held["arguments"] += function.get("arguments", "")
        if choice.finish_reason is not None:
            self._finish = choice.finish_reason
        return [self._response(parts)] if parts else []

    async def closing(self) -> list[bytes]:
        parts = [
            function_call(call["id"], call["name"], call["arguments"])
            for _, call in sorted(self._calls.items())
        ]
        last = self._response(parts or [{"text": ""}], finish_reason(self._finish))
        return [last, self._framing.end()]

    def _response(self, parts: list[dict[str, Any]], finish: str | None = None) -> bytes:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        data: dict[str, Any] = {"candidates": [candidate]}
        if finish is not None:
            candidate["finishReason"] = finish
            data["usageMetadata"] = usage_metadata(self.usage)
        data["modelVersion"] = self.model or self._model
        data["responseId"] = self._id
        return self._framing.frame(data)
