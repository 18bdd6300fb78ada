"""Chat chunks → the Responses API's stream events, in OpenAI's documented order.

``response.created``, ``response.in_progress``; the upstream's reasoning first:
``response.output_item.added`` (a ``reasoning`` item), ``response.content_part.added``,
``response.reasoning_text.delta``..., ``response.reasoning_text.done``,
``response.content_part.done``, ``response.output_item.done``; per text run:
``response.output_item.added`` (a ``message``), ``response.content_part.added``,
``response.output_text.delta``..., ``response.output_text.done``,
``response.content_part.done``, ``response.output_item.done``; per tool call:
``response.output_item.added`` (a ``function_call``),
``response.function_call_arguments.delta``...,
``response.function_call_arguments.done``, ``response.output_item.done`` (a call of a
custom tool: ``response.custom_tool_call_input.delta`` and ``.done`` with its whole input,
once the call is complete, since its text arrives JSON-encoded); then
``response.completed`` (or ``response.incomplete`` when the output limit cut it). Every
event has its ``sequence_number``, from 0. A failure after the first byte sends ``error``
then ``response.failed``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.apis.responses.translation import (
    ResponsesCall,
    finished,
    reasoning_of,
    response_object,
    tool_call_item,
)
from gateway.errors import GatewayError
from gateway.protocol import ChatCompletionChunk, ToolCallDelta, item_id
from gateway.protocol.responses import (
    CustomToolCallItem,
    FunctionCallItem,
    ItemStatus,
    OutputItem,
    OutputMessage,
    OutputText,
    ReasoningItem,
    ReasoningText,
    ResponseErrorBody,
    ResponseObject,
)
from gateway.protocol.translate import ChunkTranslator, sse

OnDone = Callable[[ResponseObject], Awaitable[None]]
_EMPTY_TEXT = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}


@dataclass
class _Text:
    index: int
    id: str = field(default_factory=lambda: item_id("msg"))
    parts: list[str] = field(default_factory=list)


@dataclass
class _Reasoning:
    index: int
    id: str = field(default_factory=lambda: item_id("rs"))
    parts: list[str] = field(default_factory=list)


@dataclass
class _Call:
    index: int
    call_id: str
    name: str
    id: str = field(default_factory=lambda: item_id("fc"))
    arguments: list[str] = field(default_factory=list)


class ResponseEvents(ChunkTranslator):
    """The Responses events of one call; ``on_done`` gets the final response (to store
    it) before ``response.completed`` is written."""

    def __init__(
        self, call: ResponsesCall, chunks: AsyncIterator[ChatCompletionChunk], on_done: OnDone
    ) -> None:
        super().__init__(chunks)
        self._call = call
        self._on_done = on_done
        self._seq = 0
        self._output: list[OutputItem] = []
        self._text: _Text | None = None
        self._reasoning: _Reasoning | None = None
        self._calls: dict[int, _Call] = {}
        self._finish: str | None = None

    def _event(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, **fields, "sequence_number": self._seq}
        self._seq += 1
        return sse(kind, data)

    def _lifecycle(self, kind: str, response: ResponseObject) -> bytes:
        return self._event(kind, response=response.model_dump(mode="json"))

    def opening(self) -> list[bytes]:
        started = response_object(self._call, self.model, status="in_progress")
        return [
            self._lifecycle("response.created", started),
            self._lifecycle("response.in_progress", started),
        ]

    def feed(self, chunk: ChatCompletionChunk) -> list[bytes]:
        choice = chunk.choices[0]
        delta, frames = choice.delta, []
        reasoning = reasoning_of(delta)
        if reasoning:
            frames.extend(self._add_reasoning(reasoning))
        if delta.content:
            frames.extend(self._close_reasoning())
            frames.extend(self._close_calls())
            frames.extend(self._add_text(delta.content))
        for piece in delta.tool_calls or ():
            frames.extend(self._add_call(piece))
        if choice.finish_reason is not None:
            self._finish = choice.finish_reason
        return frames

    async def closing(self) -> list[bytes]:
        status: ItemStatus = (
            "incomplete" if self._finish in ("length", "content_filter") else "completed"
        )
        frames = [
            *self._close_reasoning(status),
            *self._close_text(status),
            *self._close_calls(status),
        ]
        response = finished(self._call, self._output, self._finish, self.usage, self.model)
        await self._on_done(response)
        kind = "response.completed" if response.status == "completed" else "response.incomplete"
        frames.append(self._lifecycle(kind, response))
        return frames

    def failed(self, error: GatewayError) -> bytes:
        code = "rate_limit_exceeded" if error.status_code == 429 else "server_error"
        failure = self._event(
            "error", code=error.code or code, message=error.message, param=error.param
        )
        response = response_object(
            self._call,
            self.model,
            status="failed",
            output=[*self._output, *self._unfinished()],
            error=ResponseErrorBody(code=code, message=error.message),
        )
        return failure + self._lifecycle("response.failed", response)

    def _unfinished(self) -> list[OutputItem]:
        """The items still open when the stream failed, as they stood (``incomplete``)."""
        items: list[OutputItem] = []
        if self._reasoning is not None:
            said = ReasoningText(text="".join(self._reasoning.parts))
            items.append(ReasoningItem(id=self._reasoning.id, status="incomplete", content=[said]))
        if self._text is not None:
            part = OutputText(text="".join(self._text.parts))
            items.append(OutputMessage(id=self._text.id, status="incomplete", content=[part]))
        for call in self._calls.values():
            items.append(self._call_item(call, "incomplete"))
        return items

    def _call_item(self, call: _Call, status: ItemStatus) -> FunctionCallItem | CustomToolCallItem:
        arguments = "".join(call.arguments)
        tools = self._call.tools
        return tool_call_item(tools, call.call_id, call.name, arguments, status, id=call.id)

    # --- reasoning ----------------------------------------------------------------------

    def _add_reasoning(self, text: str) -> list[bytes]:
        frames = []
        item = self._reasoning
        if item is None:
            item = self._reasoning = _Reasoning(len(self._output))
            added = ReasoningItem(id=item.id, status="in_progress")
            frames.append(
                self._event(
                    "response.output_item.added",
                    output_index=item.index,
                    item=added.model_dump(mode="json"),
                )
            )
            frames.append(
                self._event(
                    "response.content_part.added",
                    item_id=item.id,
                    output_index=item.index,
                    content_index=0,
                    part={"type": "reasoning_text", "text": ""},
                )
            )
        item.parts.append(text)
        where = {"item_id": item.id, "output_index": item.index, "content_index": 0}
        frames.append(self._event("response.reasoning_text.delta", **where, delta=text))
        return frames

    def _close_reasoning(self, status: ItemStatus = "completed") -> list[bytes]:
        item, self._reasoning = self._reasoning, None
        if item is None:
            return []
        part = ReasoningText(text="".join(item.parts))
        done = ReasoningItem(id=item.id, status=status, content=[part])
        self._output.append(done)
        where = {"item_id": item.id, "output_index": item.index, "content_index": 0}
        return [
            self._event("response.reasoning_text.done", **where, text=part.text),
            self._event("response.content_part.done", **where, part=part.model_dump()),
            self._event(
                "response.output_item.done",
                output_index=item.index,
                item=done.model_dump(mode="json"),
            ),
        ]

    # --- items --------------------------------------------------------------------------

    def _add_text(self, text: str) -> list[bytes]:
        frames = []
        item = self._text
        if item is None:
            frames.extend(self._close_reasoning())
            item = self._text = _Text(len(self._output))
            added = {"id": item.id, "type": "message", "role": "assistant", "status": "in_progress"}
            frames.append(
                self._event(
                    "response.output_item.added",
                    output_index=item.index,
                    item={**added, "content": []},
                )
            )
            frames.append(
                self._event(
                    "response.content_part.added",
                    item_id=item.id,
                    output_index=item.index,
                    content_index=0,
                    part=_EMPTY_TEXT,
                )
            )
        item.parts.append(text)
        frames.append(
            self._event(
                "response.output_text.delta",
                item_id=item.id,
                output_index=item.index,
                content_index=0,
                delta=text,
                logprobs=[],
            )
        )
        return frames

    def _close_text(self, status: ItemStatus = "completed") -> list[bytes]:
        item, self._text = self._text, None
        if item is None:
            return []
        text = "".join(item.parts)
        part = OutputText(text=text)
        message = OutputMessage(id=item.id, status=status, content=[part])
        self._output.append(message)
        where = {"item_id": item.id, "output_index": item.index, "content_index": 0}
        return [
            self._event("response.output_text.done", **where, text=text, logprobs=[]),
            self._event("response.content_part.done", **where, part=part.model_dump()),
            self._event(
                "response.output_item.done",
                output_index=item.index,
                item=message.model_dump(mode="json"),
            ),
        ]

    def _add_call(self, piece: ToolCallDelta) -> list[bytes]:
        frames: list[bytes] = []
        function = piece.function or {}
        call = self._calls.get(piece.index)
        if call is None:
            frames.extend(self._close_reasoning())
            frames.extend(self._close_text())
            frames.extend(self._close_calls())
            index = len(self._output)
            call_id = piece.id or item_id("call")
            call = self._calls[piece.index] = _Call(index, call_id, function.get("name", ""))
            custom = self._call.tools.of(call.name).custom
            call.id = item_id("ctc") if custom else call.id
            item = self._call_item(call, "in_progress").model_dump(mode="json")
            frames.append(self._event("response.output_item.added", output_index=index, item=item))
        arguments = function.get("arguments")
        if arguments:
            call.arguments.append(arguments)
        if arguments and not self._call.tools.of(call.name).custom:
            frames.append(
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=call.id,
                    output_index=call.index,
                    delta=arguments,
                )
            )
        return frames

    def _close_calls(self, status: ItemStatus = "completed") -> list[bytes]:
        frames = []
        for call in self._calls.values():
            item = self._call_item(call, status)
            self._output.append(item)
            frames.extend(self._call_done(call, item))
            frames.append(
                self._event(
                    "response.output_item.done",
                    output_index=call.index,
                    item=item.model_dump(mode="json"),
                )
            )
        self._calls.clear()
        return frames

    def _call_done(self, call: _Call, item: FunctionCallItem | CustomToolCallItem) -> list[bytes]:
        where = {"item_id": call.id, "output_index": call.index}
        if isinstance(item, CustomToolCallItem):
            return [
                self._event("response.custom_tool_call_input.delta", **where, delta=item.input),
                self._event("response.custom_tool_call_input.done", **where, input=item.input),
            ]
        done = self._event(
            "response.function_call_arguments.done",
            **where,
            name=item.name,
            arguments=item.arguments,
        )
        return [done]
