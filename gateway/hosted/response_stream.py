"""The hosted-tool loop of a streamed ``/v1/responses`` request, as one event stream.

The model's own events are :class:`~gateway.ingress.response_events.ResponseEvents`'; the
gateway's items are written between them in OpenAI's order: a listing as
``response.output_item.added``, ``response.mcp_list_tools.in_progress``,
``response.mcp_list_tools.completed`` (or ``.failed``), ``response.output_item.done``; a
call of a hosted tool as ``response.output_item.added`` (an ``mcp_call``),
``response.mcp_call_arguments.delta``..., ``response.mcp_call_arguments.done``,
``response.mcp_call.in_progress``, then, once it has run, ``response.mcp_call.completed``
(or ``.failed``) and ``response.output_item.done``; a call that waits for approval as an
``mcp_approval_request`` item. After a round whose hosted calls ran, the model is called
again on the same deployment and its events go on in the same stream; one
``response.completed`` ends it, with the usage of every model call.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from backends.base import Backend
from gateway.hosted.loop import add_usage, continued
from gateway.hosted.responses import ResponsesRun, call_item, needs_approval, run_waiting
from gateway.hosted.toolset import Offered
from gateway.ingress.response_events import OnDone, ResponseEvents
from gateway.ingress.responses import ResponsesCall
from gateway.protocol import ChatCompletionChunk, ChatCompletionRequest, ToolCallDelta, Usage
from gateway.protocol.chat import FunctionCall, ToolCall
from gateway.protocol.responses import (
    McpApprovalRequestItem,
    McpCallItem,
    McpListToolsItem,
    OutputItem,
)


@dataclass
class _Hosted:
    """A call of a hosted tool, as it streams in."""

    index: int
    call_id: str
    name: str
    offered: Offered
    waits: bool
    item_id: str
    arguments: list[str] = field(default_factory=list)

    def tool_call(self) -> ToolCall:
        arguments = "".join(self.arguments)
        return ToolCall(id=self.call_id, function=FunctionCall(name=self.name, arguments=arguments))


class HostedResponseEvents(ResponseEvents):
    """The events of a Responses request with hosted tools, over as many model calls as
    its loop takes on ``backend``."""

    def __init__(
        self,
        call: ResponsesCall,
        backend: Backend,
        request: ChatCompletionRequest,
        on_done: OnDone,
    ) -> None:
        """``request``: ``call``'s chat request as ``backend`` gets it."""
        self._backend = backend
        self._run: ResponsesRun = call.hosted
        self._run.start(call)
        self._request = request
        self._ready: list[OutputItem] = list(call.leading)
        super().__init__(call, self._first_round(), on_done)
        self.delivered = None  # a later round cannot be resumed from the first one's chunks
        self._hosted: dict[int, _Hosted] = {}
        self._said: list[str] = []
        self._spent: Usage | None = None
        self._next: Callable[[], Awaitable[bytes]] | None = None

    async def _first_round(self) -> AsyncIterator[ChatCompletionChunk]:
        """The calls approved by the input run first; then the model's first answer."""
        self._request = await run_waiting(self._run, self._request, self._ready)
        async for chunk in self._backend.chat_stream(self._request):
            yield chunk

    async def __anext__(self) -> bytes:
        if self._next is not None:
            step, self._next = self._next, None
            return await step()
        return await super().__anext__()

    # --- the gateway's items ------------------------------------------------------------

    def opening(self) -> list[bytes]:
        frames = super().opening()
        for item in self._ready:
            frames.extend(self._whole_item(item))
        return frames

    def _whole_item(self, item: OutputItem) -> list[bytes]:
        """An item that is complete when it is first written (a listing, an approved call)."""
        index = len(self._output)
        self._output.append(item)
        where = {"item_id": item.id, "output_index": index}
        frames = [self._added(index, item)]
        if isinstance(item, McpListToolsItem):
            frames.append(self._event("response.mcp_list_tools.in_progress", **where))
            ended = "failed" if item.error else "completed"
            frames.append(self._event(f"response.mcp_list_tools.{ended}", **where))
        elif isinstance(item, McpCallItem):
            frames.append(
                self._event("response.mcp_call_arguments.done", **where, arguments=item.arguments)
            )
            frames.append(self._event("response.mcp_call.in_progress", **where))
            ended = "failed" if item.status == "failed" else "completed"
            frames.append(self._event(f"response.mcp_call.{ended}", **where))
        frames.append(self._done(index, item))
        return frames

    def _added(self, index: int, item: OutputItem) -> bytes:
        shown = item.model_dump(mode="json")
        if isinstance(item, McpCallItem):
            shown.update(status="in_progress", output=None, error=None)
        return self._event("response.output_item.added", output_index=index, item=shown)

    def _done(self, index: int, item: OutputItem) -> bytes:
        return self._event(
            "response.output_item.done", output_index=index, item=item.model_dump(mode="json")
        )

    # --- the model's calls of hosted tools ------------------------------------------------

    def feed(self, chunk: ChatCompletionChunk) -> list[bytes]:
        delta = chunk.choices[0].delta if chunk.choices else None
        if delta is not None and isinstance(delta.content, str) and delta.content:
            self._said.append(delta.content)
        return super().feed(chunk)

    def _add_call(self, piece: ToolCallDelta) -> list[bytes]:
        hosted = self._hosted.get(piece.index)
        function = piece.function or {}
        if hosted is None:
            name = function.get("name", "")
            offered = self._run.toolset.offered.get(name)
            if offered is None or piece.index in self._calls:
                return super()._add_call(piece)
            hosted, frames = self._open(piece, name, offered)
        else:
            frames = []
        arguments = function.get("arguments")
        if arguments:
            hosted.arguments.append(arguments)
            if not hosted.waits:
                where = {"item_id": hosted.item_id, "output_index": hosted.index}
                frames.append(
                    self._event("response.mcp_call_arguments.delta", **where, delta=arguments)
                )
        return frames

    def _open(
        self, piece: ToolCallDelta, name: str, offered: Offered
    ) -> tuple[_Hosted, list[bytes]]:
        """Start the item of a hosted call (its place in ``output`` is taken at once)."""
        frames = [*self._close_reasoning(), *self._close_text(), *self._close_calls()]
        index = len(self._output)
        call_id = piece.id or f"call_{index}"
        waits = needs_approval(offered)
        item: OutputItem
        if waits:
            item = McpApprovalRequestItem(
                server_label=offered.label, name=offered.name, arguments=""
            )
        else:
            item = McpCallItem(
                id=call_id,
                status="in_progress",
                server_label=offered.label,
                name=offered.name,
                arguments="",
            )
        self._output.append(item)
        hosted = _Hosted(index, call_id, name, offered, waits, item.id)
        self._hosted[piece.index] = hosted
        frames.append(self._added(index, item))
        return hosted, frames

    async def closing(self) -> list[bytes]:
        """After a round: its hosted calls' arguments are done; if any are to run, the
        next step runs them and starts the next round, else the response ends."""
        self._spent = add_usage(self._spent, self.usage)
        frames = [*self._close_reasoning(), *self._close_text()]
        runnable = [h for h in self._hosted.values() if not h.waits]
        waiting = [h for h in self._hosted.values() if h.waits]
        for hosted in waiting:
            frames.append(self._approval_done(hosted))
        for hosted in runnable:
            where = {"item_id": hosted.item_id, "output_index": hosted.index}
            arguments = "".join(hosted.arguments)
            frames.append(
                self._event("response.mcp_call_arguments.done", **where, arguments=arguments)
            )
        toolset = self._run.toolset
        room = toolset.max_calls - toolset.calls
        if runnable and room < len(runnable):
            self._call.stopped = "max_tool_calls"
        if not runnable or waiting or self._calls or room < len(runnable):
            return frames + await self._end(runnable[: max(room, 0)])
        for hosted in runnable:
            where = {"item_id": hosted.item_id, "output_index": hosted.index}
            frames.append(self._event("response.mcp_call.in_progress", **where))
        self._next = lambda: self._run_round(runnable, again=True)
        self._ended = False  # the stream goes on with the next round
        return frames

    def _approval_done(self, hosted: _Hosted) -> bytes:
        item = self._output[hosted.index]
        assert isinstance(item, McpApprovalRequestItem)
        item.arguments = "".join(hosted.arguments)
        return self._done(hosted.index, item)

    async def _run_round(self, runnable: list[_Hosted], again: bool) -> bytes:
        """Run the round's hosted calls, write their ends, and (``again``) call the model
        once more with their results."""
        frames: list[bytes] = []
        results = []
        toolset = self._run.toolset
        for hosted in runnable:
            tool_call = hosted.tool_call()
            outcome = await toolset.call(hosted.name, tool_call.function.arguments)
            item = call_item(hosted.offered, tool_call, outcome, toolset.max_result_chars)
            item.id = hosted.item_id
            self._output[hosted.index] = item
            where = {"item_id": hosted.item_id, "output_index": hosted.index}
            frames.append(
                self._event(
                    "response.mcp_call.failed" if outcome.failed else "response.mcp_call.completed",
                    **where,
                )
            )
            frames.append(self._done(hosted.index, item))
            results.append((tool_call, outcome.text(toolset.max_result_chars)))
        if again:
            said = "".join(self._said) or None
            self._request = continued(self._request, said, results)
            self._restart(self._request)
        return b"".join(frames)

    def _restart(self, request: ChatCompletionRequest) -> None:
        self._hosted.clear()
        self._said.clear()
        self.usage, self._finish = None, None
        self.resume_with(self._backend.chat_stream(request))

    async def _end(self, runnable: list[_Hosted]) -> list[bytes]:
        """The last round: calls still to run (alongside a client's or an approval's)
        run, then the response ends with the usage of every round."""
        frames = [await self._run_round(runnable, again=False)] if runnable else []
        self.usage = self._spent
        if self._call.stopped:
            self._finish = self._call.stopped
        return frames + await super().closing()
