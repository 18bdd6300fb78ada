"""The gateway's own tool loop over one deployment, whichever API asked: dispatch runs it
in place of a plain model call (:class:`~gateway.dispatch.HostedLoop`), and the API's
encoder turns what it recorded into its own items or blocks.

A round is one model call. Its calls of hosted tools are sorted in the model's order:
one that waits for the client's approval (an MCP server that requires it) is not run;
the others run while the request's bound (``max_tool_calls``) allows. How the bound cuts
a round is the API's: ``per_call`` runs as many as fit (Responses), ``per_round`` runs
none of a round that does not fit whole (Messages: the turn pauses). The model is called
again, with the results as tool messages, unless a call waits, the model also called a
client tool, or the bound was reached.

A stream is every round's chunks, with the loop's steps between them
(:class:`RoundEnd` once a round's calls are known, before they run; :class:`ToolsRan`
once they ran), and a last usage chunk that counts every model call.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any, Literal

from backends.base import Backend
from gateway.hosted.loop import add_usage, continued
from gateway.hosted.toolset import Offered, Outcome, Toolset
from gateway.mcp.hub import qualified_name
from gateway.protocol import ChatCompletion, ChatCompletionChunk, ChatCompletionRequest, Usage, now
from gateway.protocol.chat import FunctionCall, ToolCall

Bound = Literal["per_call", "per_round"]
State = Literal["ran", "waits", "dropped"]
DECLINED = "The user declined to run this tool."


@dataclass
class CallRecord:
    """One hosted call the model made (or the input approved): ``state`` ``ran`` (with
    its ``outcome``), ``waits`` for approval, or ``dropped`` past the bound;
    ``approval``: the approval request the input answered."""

    call: ToolCall
    offered: Offered | None
    state: State = "ran"
    outcome: Outcome | None = None
    approval: str | None = None


@dataclass
class Round:
    """What one model call did that the loop acted on: its text, its hosted calls."""

    said: str | None
    calls: list[CallRecord] = field(default_factory=list)


@dataclass(frozen=True)
class Approved:
    """A call the client approved (or declined) since the turn that asked for it."""

    request_id: str
    label: str
    name: str
    arguments: str
    approve: bool


@dataclass(frozen=True)
class RoundEnd:
    """A round's end, before its runnable calls run: its hosted calls, in the model's
    order, and whether the model is called again after them."""

    calls: list[CallRecord]
    continuing: bool


@dataclass(frozen=True)
class ToolsRan:
    """The round's calls that ran, with their outcomes."""

    calls: list[CallRecord]


class HostedRun:
    """The loop of one request (see the module docstring); what one attempt on a
    deployment recorded is in :attr:`approved`, :attr:`rounds` and :attr:`stopped`
    (a new attempt starts them afresh)."""

    def __init__(
        self, toolset: Toolset, bound: Bound, approved: list[Approved] | None = None
    ) -> None:
        self.toolset = toolset
        self.bound = bound
        self.given = approved or []
        self.approved: list[CallRecord] = []
        self.rounds: list[Round] = []
        self.stopped = False

    def _start(self) -> None:
        self.approved, self.rounds, self.stopped = [], [], False
        self.toolset.calls = 0

    # --- a whole answer ----------------------------------------------------------------

    async def whole(self, backend: Backend, request: ChatCompletionRequest) -> ChatCompletion:
        """The model's last answer, its text and calls taken by the loop removed when
        the loop ended on hosted calls; its usage is every call's."""
        self._start()
        request = await self._run_approved(request)
        spent = None
        while True:
            answered = await backend.chat(request)
            spent = add_usage(spent, answered.usage)
            message = answered.choices[0].message
            calls = message.tool_calls or []
            hosted = [c for c in calls if c.function.name in self.toolset.offered]
            if not hosted:
                break
            client = [c for c in calls if c.function.name not in self.toolset.offered]
            said = message.content if isinstance(message.content, str) else None
            round_ = self._round(said, hosted)
            continuing = self._continues(round_, bool(client))
            await self._run(round_)
            if not continuing:
                message.content, message.tool_calls = None, client or None
                break
            request = continued(request, said, self._results(round_))
        answered.usage = spent
        return answered

    # --- a stream -------------------------------------------------------------------------

    def stream(self, backend: Backend, request: ChatCompletionRequest) -> HostedStream:
        self._start()
        return HostedStream(self, backend, request)

    # --- the steps --------------------------------------------------------------------------

    async def _run_approved(self, request: ChatCompletionRequest) -> ChatCompletionRequest:
        """The calls the input approved (or declined) run before the model is called;
        their results join the chat request."""
        results: list[tuple[ToolCall, str]] = []
        offered = self.toolset.offered
        limit = self.toolset.max_result_chars
        for given in self.given:
            name = qualified_name(given.label, given.name)
            call = ToolCall(
                id=given.request_id, function=FunctionCall(name=name, arguments=given.arguments)
            )
            tool = offered.get(name)
            if not given.approve or tool is None:
                results.append(
                    (call, DECLINED if tool is not None else f"There is no tool '{name}'.")
                )
                continue
            outcome = await self.toolset.call(name, given.arguments)
            self.approved.append(CallRecord(call, tool, "ran", outcome, given.request_id))
            results.append((call, outcome.text(limit)))
        return continued(request, None, results) if results else request

    def _round(self, said: str | None, hosted: list[ToolCall]) -> Round:
        """A round's hosted calls sorted: waiting for approval, to run, past the bound."""
        toolset, offered = self.toolset, self.toolset.offered
        records = []
        for call in hosted:
            tool = offered[call.function.name]
            waits = tool.server is not None and tool.server.approval.required(tool.tool)
            records.append(CallRecord(call, tool, "waits" if waits else "ran"))
        runnable = [r for r in records if r.state == "ran"]
        room = max(0, toolset.max_calls - toolset.calls)
        if len(runnable) > room:
            self.stopped = True
            cut = runnable[room:] if self.bound == "per_call" else runnable
            for record in cut:
                record.state = "dropped"
        round_ = Round(said, records)
        self.rounds.append(round_)
        return round_

    def _continues(self, round_: Round, client: bool) -> bool:
        """Whether the model is called again after this round's calls."""
        states = {r.state for r in round_.calls}
        return states == {"ran"} and not client and not self.stopped

    async def _run(self, round_: Round) -> list[CallRecord]:
        ran = [r for r in round_.calls if r.state == "ran"]
        for record in ran:
            function = record.call.function
            record.outcome = await self.toolset.call(function.name, function.arguments)
        return ran

    def _results(self, round_: Round) -> list[tuple[ToolCall, str]]:
        limit = self.toolset.max_result_chars
        return [(r.call, r.outcome.text(limit)) for r in round_.calls if r.outcome is not None]


class HostedStream:
    """A streamed run: every round's chunks and the loop's steps; its :attr:`usage` counts
    every model call once it ended. Not resumable: a later round cannot be continued from
    an earlier one's chunks."""

    def __init__(self, run: HostedRun, backend: Backend, request: ChatCompletionRequest) -> None:
        self._run = run
        self._backend = backend
        self._request = request
        self._pieces = self._rounds()
        self.usage: Usage | None = None
        self.usage_frame: bytes | None = None

    def __aiter__(self) -> HostedStream:
        return self

    async def __anext__(self) -> Any:
        return await anext(self._pieces)

    async def aclose(self) -> None:
        await self._pieces.aclose()

    async def _rounds(self) -> AsyncGenerator[Any, None]:
        run = self._run
        request = await run._run_approved(self._request)
        spent: Usage | None = None
        while True:
            heard = _Heard(run.toolset.offered)
            async for chunk in self._backend.chat_stream(request):
                heard.add(chunk)
                if chunk.usage is not None:
                    spent = add_usage(spent, chunk.usage)
                if chunk.choices:
                    yield chunk
            if not heard.hosted:
                break
            round_ = run._round(heard.said(), heard.calls())
            continuing = run._continues(round_, heard.client)
            yield RoundEnd(round_.calls, continuing)
            ran = await run._run(round_)
            if ran:
                yield ToolsRan(ran)
            if not continuing:
                break
            request = continued(request, round_.said, run._results(round_))
        self.usage = spent
        yield ChatCompletionChunk(
            id="", created=now(), model=request.model, choices=[], usage=spent
        )


class _Heard:
    """What a round's chunks said: its text and its hosted calls, put together from their
    deltas; whether it called a client tool too."""

    def __init__(self, offered: dict[str, Offered]) -> None:
        self._offered = offered
        self._said: list[str] = []
        self._calls: dict[int, list[str]] = {}
        self._names: dict[int, tuple[str, str]] = {}
        self.hosted = False
        self.client = False

    def add(self, chunk: ChatCompletionChunk) -> None:
        if not chunk.choices:
            return
        delta = chunk.choices[0].delta
        if isinstance(delta.content, str) and delta.content:
            self._said.append(delta.content)
        for piece in delta.tool_calls or ():
            function = piece.function or {}
            if piece.index not in self._names:
                name = function.get("name", "")
                if name not in self._offered:
                    self.client = True
                    self._names[piece.index] = ("", "")
                    continue
                self.hosted = True
                self._names[piece.index] = (piece.id or f"call_{piece.index}", name)
                self._calls[piece.index] = []
            if piece.index in self._calls and function.get("arguments"):
                self._calls[piece.index].append(function["arguments"])

    def said(self) -> str | None:
        return "".join(self._said) or None

    def calls(self) -> list[ToolCall]:
        return [
            ToolCall(
                id=self._names[index][0],
                function=FunctionCall(name=self._names[index][1], arguments="".join(parts)),
            )
            for index, parts in sorted(self._calls.items())
        ]
