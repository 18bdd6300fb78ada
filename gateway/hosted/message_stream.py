"""The hosted-tool loop of a streamed ``/v1/messages`` request, as one event stream.

A hosted call streams as an ``mcp_tool_use`` block (``content_block_start`` with
``input: {}``, ``input_json_delta``..., ``content_block_stop``); once the round's calls
have run, each result is an ``mcp_tool_result`` block (start and stop), and the model's
next answer goes on in the same message. One ``message_delta`` (with the usage of every
model call) and ``message_stop`` end it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from backends.base import Backend
from gateway.hosted.loop import add_usage, continued
from gateway.hosted.messages import restart, result_block
from gateway.hosted.toolset import Toolset
from gateway.ingress.message_events import MessageEvents
from gateway.ingress.messages import MessagesCall
from gateway.ingress.translate import sse
from gateway.protocol import ChatCompletionChunk, ChatCompletionRequest, ToolCallDelta, Usage
from gateway.protocol.chat import FunctionCall, ToolCall


@dataclass
class _Hosted:
    call_id: str
    name: str
    arguments: list[str] = field(default_factory=list)

    def tool_call(self) -> ToolCall:
        arguments = "".join(self.arguments)
        return ToolCall(id=self.call_id, function=FunctionCall(name=self.name, arguments=arguments))


class HostedMessageEvents(MessageEvents):
    """The events of a Messages request with hosted tools, over as many model calls as
    its loop takes on ``backend``."""

    def __init__(
        self, call: MessagesCall, backend: Backend, request: ChatCompletionRequest
    ) -> None:
        super().__init__(backend.chat_stream(request), request.model)
        self.delivered = None  # a later round cannot be resumed from the first one's chunks
        self._call = call
        restart(call)
        self._backend = backend
        self._request = request
        self._toolset: Toolset = call.hosted
        self._hosted: dict[int, _Hosted] = {}
        self._client = False
        self._said: list[str] = []
        self._spent: Usage | None = None
        self._next: Callable[[], Awaitable[bytes]] | None = None

    async def __anext__(self) -> bytes:
        if self._next is not None:
            step, self._next = self._next, None
            return await step()
        return await super().__anext__()

    def feed(self, chunk: ChatCompletionChunk) -> list[bytes]:
        delta = chunk.choices[0].delta
        if isinstance(delta.content, str) and delta.content:
            self._said.append(delta.content)
        return super().feed(chunk)

    def _tool(self, piece: ToolCallDelta) -> list[bytes]:
        function = piece.function or {}
        hosted = self._hosted.get(piece.index)
        if hosted is None:
            name = function.get("name", "")
            offered = self._toolset.offered.get(name)
            if offered is None or self._open == f"tool:{piece.index}":
                self._client = True
                return super()._tool(piece)
            hosted = self._hosted[piece.index] = _Hosted(
                piece.id or f"mcptoolu_{piece.index}", name
            )
            block = {
                "type": "mcp_tool_use",
                "id": hosted.call_id,
                "name": offered.name,
                "server_name": offered.label,
                "input": {},
            }
            frames = self._start(block, f"mcp:{piece.index}")
        else:
            frames = []
        arguments = function.get("arguments")
        if arguments:
            hosted.arguments.append(arguments)
            frames.append(self._delta({"type": "input_json_delta", "partial_json": arguments}))
        return frames

    async def closing(self) -> list[bytes]:
        self._spent = add_usage(self._spent, self.usage)
        toolset = self._toolset
        hosted = list(self._hosted.values())
        if not hosted:
            return await self._end()
        if toolset.calls + len(hosted) > toolset.max_calls:
            self._call.stopped = "pause_turn"
            return await self._end()
        frames = self._stop_block()
        self._next = lambda: self._run_round(hosted)
        self._ended = False  # the stream goes on with the results and the next round
        return frames

    async def _run_round(self, hosted: list[_Hosted]) -> bytes:
        frames: list[bytes] = []
        results = []
        limit = self._toolset.max_result_chars
        for one in hosted:
            tool_call = one.tool_call()
            outcome = await self._toolset.call(one.name, tool_call.function.arguments)
            frames.extend(self._whole_block(result_block(one.call_id, outcome, limit)))
            results.append((tool_call, outcome.text(limit)))
        if self._client:  # the client's own calls end the turn, after the hosted ones ran
            frames.extend(await self._end())
            self._ended = True
            return b"".join(frames)
        said = "".join(self._said) or None
        self._request = continued(self._request, said, results)
        self._hosted.clear()
        self._said.clear()
        self.usage, self._finish, self._stop = None, None, None
        self.resume_with(self._backend.chat_stream(self._request))
        return b"".join(frames)

    def _whole_block(self, block: dict[str, object]) -> list[bytes]:
        frames = self._start(block, "result")
        self._open = None
        frames.append(
            sse("content_block_stop", {"type": "content_block_stop", "index": self._block})
        )
        return frames

    async def _end(self) -> list[bytes]:
        self.usage = self._spent
        if self._call.stopped:
            self._finish = self._call.stopped
        return await super().closing()
