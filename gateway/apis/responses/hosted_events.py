"""The gateway's tool loop of a streamed ``/v1/responses`` request, as one event stream.

Dispatch runs the loop (:mod:`gateway.hosted.run`): its stream is every round's chunks with
the loop's steps between them. The model's own events are
:class:`~gateway.apis.responses.events.ResponseEvents`'; the gateway's items are written
between them in OpenAI's order: a listing (and a call the input approved) as
``response.output_item.added``, ``response.mcp_list_tools.in_progress``,
``response.mcp_list_tools.completed`` (or ``.failed``), ``response.output_item.done``; a
call of a hosted tool as ``response.output_item.added`` (an ``mcp_call``),
``response.mcp_call_arguments.delta``..., ``response.mcp_call_arguments.done``,
``response.mcp_call.in_progress``, then, once it has run, ``response.mcp_call.completed``
(or ``.failed``) and ``response.output_item.done``; a call that waits for approval as an
``mcp_approval_request`` item. One ``response.completed`` ends it, with the usage of
every model call.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from gateway.apis.responses.events import OnDone, ResponseEvents
from gateway.apis.responses.hosted import call_item, needs_approval, record_item
from gateway.apis.responses.translation import ResponsesCall
from gateway.hosted.run import HostedRun, RoundEnd, ToolsRan
from gateway.hosted.toolset import Offered
from gateway.protocol import ToolCallDelta
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
    offered: Offered
    waits: bool
    item_id: str
    arguments: list[str] = field(default_factory=list)


class HostedResponseEvents(ResponseEvents):
    """The events of a Responses request with hosted tools, over as many model calls as
    its loop took."""

    def __init__(self, call: ResponsesCall, pieces: AsyncIterator[Any], on_done: OnDone) -> None:
        super().__init__(call, pieces, on_done)
        run = call.hosted
        assert run is not None, "a call with hosted tools"
        self._run: HostedRun = run
        self._hosted: dict[int, _Hosted] = {}
        self._continuing = False

    # --- the gateway's items ------------------------------------------------------------

    def opening(self) -> list[bytes]:
        frames = super().opening()
        limit = self._run.toolset.max_result_chars
        for item in self._call.listed:
            frames.extend(self._whole_item(item))
        for record in self._run.approved:
            approved = record_item(record, limit)
            if approved is not None:
                approved.id = f"mcp_{(record.approval or '').removeprefix('mcpr_')}"
                frames.extend(self._whole_item(approved))
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

    def _add_call(self, piece: ToolCallDelta) -> list[bytes]:
        hosted = self._hosted.get(piece.index)
        function = piece.function or {}
        if hosted is None:
            offered = self._run.toolset.offered.get(function.get("name", ""))
            if offered is None or piece.index in self._calls:
                return super()._add_call(piece)
            hosted, frames = self._open(piece, offered)
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

    def _open(self, piece: ToolCallDelta, offered: Offered) -> tuple[_Hosted, list[bytes]]:
        """Start the item of a hosted call (its place in ``output`` is taken at once)."""
        frames = [*self._close_reasoning(), *self._close_text(), *self._close_calls()]
        index = len(self._output)
        call_id = piece.id or f"call_{piece.index}"
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
        hosted = _Hosted(index, call_id, offered, waits, item.id)
        self._hosted[piece.index] = hosted
        frames.append(self._added(index, item))
        return hosted, frames

    # --- the loop's steps ---------------------------------------------------------------

    def step(self, piece: Any) -> list[bytes]:
        if isinstance(piece, RoundEnd):
            return self._round_end(piece)
        if isinstance(piece, ToolsRan):
            return self._tools_ran(piece)
        return super().step(piece)

    def _round_end(self, end: RoundEnd) -> list[bytes]:
        """A round's calls are known: the waiting ones' items are done, the others'
        arguments (and, when the model is called again, their runs begin)."""
        frames = [*self._close_reasoning(), *self._close_text()]
        for hosted in self._hosted.values():
            item = self._output[hosted.index]
            where = {"item_id": hosted.item_id, "output_index": hosted.index}
            arguments = "".join(hosted.arguments)
            if hosted.waits and isinstance(item, McpApprovalRequestItem):
                item.arguments = arguments
                frames.append(self._done(hosted.index, item))
                continue
            frames.append(
                self._event("response.mcp_call_arguments.done", **where, arguments=arguments)
            )
        if end.continuing:
            for hosted in self._hosted.values():
                where = {"item_id": hosted.item_id, "output_index": hosted.index}
                frames.append(self._event("response.mcp_call.in_progress", **where))
        self._continuing = end.continuing
        return frames

    def _tools_ran(self, ran: ToolsRan) -> list[bytes]:
        """The round's calls ran: each one's end; a new round begins when it goes on."""
        frames: list[bytes] = []
        limit = self._run.toolset.max_result_chars
        by_id = {h.call_id: h for h in self._hosted.values()}
        for record in ran.calls:
            hosted = by_id.get(record.call.id)
            if hosted is None or record.outcome is None:
                continue
            item = call_item(hosted.offered, record.call, record.outcome, limit)
            item.id = hosted.item_id
            self._output[hosted.index] = item
            where = {"item_id": hosted.item_id, "output_index": hosted.index}
            ended = "failed" if record.outcome.failed else "completed"
            frames.append(self._event(f"response.mcp_call.{ended}", **where))
            frames.append(self._done(hosted.index, item))
        if self._continuing:
            self._hosted.clear()
            self.usage, self._finish = None, None
        return frames

    async def closing(self) -> list[bytes]:
        if self._run.stopped:
            self._call.stopped = self._finish = "max_tool_calls"
        return await super().closing()
