"""The gateway's tool loop of a streamed ``/v1/messages`` request, as one event stream.

Dispatch runs the loop (:mod:`gateway.hosted.run`): its stream is every round's chunks with
the loop's steps between them. A hosted call streams as an ``mcp_tool_use`` block
(``content_block_start`` with ``input: {}``, ``input_json_delta``...,
``content_block_stop``); once the round's calls have run, each result is an
``mcp_tool_result`` block (start and stop), and the model's next answer goes on in the same
message. One ``message_delta`` (with the usage of every model call; ``pause_turn`` when the
bound of hosted calls was reached) and ``message_stop`` end it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from gateway.apis.anthropic.events import MessageEvents
from gateway.apis.anthropic.hosted import result_block
from gateway.apis.anthropic.translation import MessagesCall
from gateway.hosted.run import HostedRun, RoundEnd, ToolsRan
from gateway.protocol import ToolCallDelta
from gateway.protocol.translate import sse


class HostedMessageEvents(MessageEvents):
    """The events of a Messages request with hosted tools, over as many model calls as
    its loop took."""

    def __init__(self, call: MessagesCall, pieces: AsyncIterator[Any], model: str) -> None:
        super().__init__(pieces, model)
        run = call.hosted
        assert run is not None, "a call with hosted tools"
        self._run: HostedRun = run
        self._hosted: set[int] = set()

    def _tool(self, piece: ToolCallDelta) -> list[bytes]:
        function = piece.function or {}
        if piece.index not in self._hosted:
            offered = self._run.toolset.offered.get(function.get("name", ""))
            if offered is None or self._open == f"tool:{piece.index}":
                return super()._tool(piece)
            self._hosted.add(piece.index)
            block = {
                "type": "mcp_tool_use",
                "id": piece.id or f"call_{piece.index}",
                "name": offered.name,
                "server_name": offered.label,
                "input": {},
            }
            frames = self._start(block, f"mcp:{piece.index}")
        else:
            frames = []
        arguments = function.get("arguments")
        if arguments:
            frames.append(self._delta({"type": "input_json_delta", "partial_json": arguments}))
        return frames

    def step(self, piece: Any) -> list[bytes]:
        if isinstance(piece, RoundEnd):
            return self._stop_block()
        if isinstance(piece, ToolsRan):
            return self._tools_ran(piece)
        return super().step(piece)

    def _tools_ran(self, ran: ToolsRan) -> list[bytes]:
        """Each result as a whole block; the next round's blocks follow."""
        frames: list[bytes] = []
        limit = self._run.toolset.max_result_chars
        for record in ran.calls:
            if record.outcome is not None:
                frames.extend(
                    self._whole_block(result_block(record.call.id, record.outcome, limit))
                )
        self._hosted.clear()
        self._finish, self._stop = None, None
        return frames

    def _whole_block(self, block: dict[str, object]) -> list[bytes]:
        frames = self._start(block, "result")
        self._open = None
        frames.append(
            sse("content_block_stop", {"type": "content_block_stop", "index": self._block})
        )
        return frames

    async def closing(self) -> list[bytes]:
        if self._run.stopped:
            self._finish = "pause_turn"
        return await super().closing()
