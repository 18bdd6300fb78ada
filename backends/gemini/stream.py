"""Gemini ``streamGenerateContent?alt=sse`` events → OpenAI chat chunks.

Each event is a whole ``GenerateContentResponse`` holding the answer's next parts: text
becomes a ``content`` delta, thought text a ``reasoning_content`` delta, and each
``functionCall`` (Gemini sends a call whole, never in pieces) one ``tool_calls[i]`` delta
with its id, name and all its arguments. The first chunk carries the role; the event with
a ``finishReason`` adds a ``finish_reason`` chunk, which makes the answer whole (Gemini's
stream has no end marker: a body that ends before it is cut). :meth:`final` gives the usage
chunk (``choices: []``) from the last ``usageMetadata`` seen.
"""

from __future__ import annotations

from typing import Any

from backends.gemini.answer import chat_usage, finish_reason, read_parts
from gateway.protocol import ChatCompletionChunk, ChoiceDelta, ChunkChoice, ToolCallDelta, now
from gateway.protocol.common import FinishReason, new_id


class StreamTranslator:
    """Feed it each decoded event in order; it returns the chunks to send."""

    def __init__(self, model: str) -> None:
        """``model``: the name every chunk carries (what the client asked for)."""
        self.id = ""
        self.model = model
        self.created = now()
        self.finished = False
        self._calls = 0
        self._usage: dict[str, Any] | None = None

    def feed(self, event: dict[str, Any]) -> list[ChatCompletionChunk]:
        """The chunks for one event (``KeyError``/``TypeError``/``AttributeError`` if it
        is malformed)."""
        out: list[ChatCompletionChunk] = []
        if not self.id:
            self.id = event.get("responseId") or new_id("chatcmpl")
            out.append(self._chunk(ChoiceDelta(role="assistant", content="")))
        if isinstance(meta := event.get("usageMetadata"), dict):
            self._usage = meta
        candidates = event.get("candidates") or []
        if not candidates:
            if (event.get("promptFeedback") or {}).get("blockReason"):
                self.finished = True
                out.append(self._chunk(ChoiceDelta(), "content_filter"))
            return out
        candidate = candidates[0]
        parts = read_parts((candidate.get("content") or {}).get("parts") or [])
        delta = ChoiceDelta()
        if parts.text:
            delta.content = "".join(parts.text)
        if parts.thoughts:
            delta.reasoning_content = "".join(parts.thoughts)
        if parts.calls:
            delta.tool_calls = []
            for call in parts.calls:
                function = {"name": call.function.name, "arguments": call.function.arguments}
                delta.tool_calls.append(
                    ToolCallDelta(index=self._calls, id=call.id, type="function", function=function)
                )
                self._calls += 1
        if delta.content or delta.reasoning_content or delta.tool_calls:
            out.append(self._chunk(delta))
        reason = candidate.get("finishReason")
        if reason is not None:
            self.finished = True
            out.append(self._chunk(ChoiceDelta(), finish_reason(reason, called=self._calls > 0)))
        return out

    def final(self) -> ChatCompletionChunk:
        """The last chunk: no choices, the usage of the whole answer."""
        return ChatCompletionChunk(
            id=self.id or new_id("chatcmpl"),
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
