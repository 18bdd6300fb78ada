"""Hosted tools of ``/v1/responses``: ``{"type": "mcp", ...}`` tools, approval requests and
responses, and stand-ins (``web_search``), run by the gateway on any deployment.

:func:`prepare` (at decode) resolves the request's servers, lists their tools (or reuses a
listing of an earlier turn: an ``mcp_list_tools`` item of the previous response or of the
input), and offers them to the model; dispatch runs the gateway's tool loop
(:mod:`gateway.hosted.run`) in place of the model call, and the encoder writes what it did:
:func:`lead` for a whole answer, :mod:`gateway.apis.responses.hosted_events` for a stream.
The items the gateway adds (``mcp_list_tools``, ``mcp_call``, ``mcp_approval_request``, and
the model's text between calls) come before the model's last answer in ``output``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from gateway.admission.keys import KeyInfo
from gateway.apis.responses.tools import ToolName
from gateway.apis.responses.translation import ResponsesCall
from gateway.errors import InvalidRequestError
from gateway.hosted.context import HostedContext
from gateway.hosted.run import Approved, CallRecord, HostedRun
from gateway.hosted.toolset import (
    Approval,
    HostedServer,
    Offered,
    Outcome,
    Toolset,
    listed_tool,
)
from gateway.mcp.hub import ToolHub, ToolServerError, qualified_name
from gateway.protocol.chat import ToolCall
from gateway.protocol.responses import (
    FunctionTool,
    InputItem,
    McpApprovalRequestItem,
    McpCallItem,
    McpListedTool,
    McpListToolsItem,
    OutputItem,
    OutputMessage,
    OutputText,
    ResponsesRequest,
)
from gateway.protocol.validation import request_error


class ToolFilter(BaseModel):
    """`allowed_tools` (and an approval filter) as an object: tool names, read-only."""

    model_config = ConfigDict(extra="forbid", strict=True)

    tool_names: list[str] | None = None
    read_only: bool | None = None


class ApprovalFilter(BaseModel):
    """`require_approval` as an object: the tools that always or never wait."""

    model_config = ConfigDict(extra="forbid", strict=True)

    always: ToolFilter | None = None
    never: ToolFilter | None = None


class McpToolParam(BaseModel):
    """An ``mcp`` tool of the request, as OpenAI's ``MCPTool`` schema types it."""

    model_config = ConfigDict(extra="allow", strict=True)

    type: Literal["mcp"]
    server_label: str
    server_url: str | None = None
    server_description: str | None = None
    allowed_tools: list[str] | ToolFilter | None = None
    require_approval: Literal["always", "never"] | ApprovalFilter | None = "always"
    headers: dict[str, str] | None = None
    authorization: str | None = None


async def prepare(
    call: ResponsesCall, context: HostedContext, key: KeyInfo, request_id: str
) -> ResponsesRequest:
    """Resolve and list the request's hosted tools into ``call`` (its ``hosted`` run,
    its ``leading`` listing items, its tool map); the body as the chat translation reads
    it (a ``tool_choice`` naming a hosted tool names its function)."""
    body = call.body
    toolset = Toolset(context.caller(key, body.model, request_id))
    settings = context.settings
    bound = body.max_tool_calls or settings.max_tool_calls
    toolset.max_calls, toolset.max_result_chars = bound, settings.max_result_chars
    for i, tool in enumerate(body.tools or ()):
        if tool.type == "mcp" and context.runs_mcp:
            toolset.servers.append(_server(tool, f"tools[{i}]", context))
        elif tool.type in context.stand_in_kinds():
            toolset.stand_ins.append(context.stand_in(tool.type, f"tools[{i}]"))
    if not toolset:
        return body
    toolset.refuse_ungranted()
    _reuse_listings(toolset, [*call.earlier, *_given_items(body.input)])
    await toolset.list()
    call.listed = [_listing(s) for s in toolset.servers if s.listed]
    call.hosted = HostedRun(toolset, "per_call", _approved(body.input, call.earlier))
    call.tools.gateway_runs = True
    for function in toolset.functions():
        name = function["function"]["name"]
        call.tools.chat.append(function)
        call.tools.names[name] = ToolName(name)
    return _with_choice(body, toolset)


def _server(tool: FunctionTool, where: str, context: HostedContext) -> HostedServer:
    try:
        given = McpToolParam.model_validate(tool.model_dump(exclude_none=True))
    except ValidationError as exc:
        error = request_error(exc)
        error.param = f"{where}.{error.param}" if error.param else where
        raise error from None
    configured = context.configured(given.server_label, given.server_url)
    if configured is not None and context.hub is not None:
        hub: ToolHub = context.hub
    elif given.server_url is None:
        raise InvalidRequestError(
            f"No MCP server labelled '{given.server_label}' is configured on this gateway.",
            param=f"{where}.server_label",
        )
    else:
        headers = dict(given.headers or {})
        if given.authorization:
            headers["authorization"] = f"Bearer {given.authorization}"
        hub = context.remote(given.server_label, given.server_url, headers, f"{where}.server_url")
        configured = given.server_label
    return HostedServer(
        label=given.server_label,
        server=configured,
        hub=hub,
        where=f"{where}.server_label",
        allowed=_allowed(given.allowed_tools),
        approval=_approval(given.require_approval),
    )


def _allowed(given: list[str] | ToolFilter | None) -> frozenset[str] | None:
    if given is None:
        return None
    names = given if isinstance(given, list) else given.tool_names
    return None if names is None else frozenset(names)


def _approval(given: Literal["always", "never"] | ApprovalFilter | None) -> Approval:
    if given is None or isinstance(given, str):
        return Approval(given or "always")
    always = given.always.tool_names if given.always is not None else None
    never = given.never.tool_names if given.never is not None else None
    return Approval(None, frozenset(always or ()), frozenset(never or ()))


def _given_items(given: str | list[InputItem]) -> list[dict[str, Any]]:
    if isinstance(given, str):
        return []
    return [item.model_dump(mode="json", exclude_none=True) for item in given]


def _reuse_listings(toolset: Toolset, items: Iterable[Mapping[str, Any]]) -> None:
    """Earlier turns' listings, for the servers of this request (OpenAI lists a server
    once per conversation)."""
    for item in items:
        if item.get("type") != "mcp_list_tools" or item.get("error"):
            continue
        server = toolset.label(str(item.get("server_label")))
        if server is None or server.listed:
            continue
        tools = [
            listed_tool(server.server, t) for t in item.get("tools") or () if isinstance(t, dict)
        ]
        server.tools = [t for t in tools if t is not None]


def _approved(given: str | list[InputItem], earlier: list[dict[str, Any]]) -> list[Approved]:
    """The calls the input approves or declines, each found in an earlier approval
    request (of the previous response, or of the input itself)."""
    if isinstance(given, str):
        return []
    asked = {
        item.get("id"): item
        for item in [*earlier, *_given_items(given)]
        if item.get("type") == "mcp_approval_request"
    }
    waiting = []
    for i, item in enumerate(given):
        if item.type != "mcp_approval_response":
            continue
        extra = item.model_extra or {}
        request_id, approve = extra.get("approval_request_id"), extra.get("approve")
        if not isinstance(approve, bool):
            raise InvalidRequestError("approve must be true or false.", param=f"input[{i}].approve")
        request = asked.get(request_id)
        if request is None:
            raise InvalidRequestError(
                f"No approval request '{request_id}' is in this conversation.",
                param=f"input[{i}].approval_request_id",
            )
        label, name = str(request.get("server_label")), str(request.get("name"))
        arguments = str(request.get("arguments") or "{}")
        waiting.append(Approved(str(request_id), label, name, arguments, approve))
    return waiting


def _with_choice(body: ResponsesRequest, toolset: Toolset) -> ResponsesRequest:
    """``tool_choice`` naming a hosted tool, as the function it is offered as."""
    choice = body.tool_choice
    if not isinstance(choice, dict):
        return body
    kind, label, name = choice.get("type"), choice.get("server_label"), choice.get("name")
    if kind == "mcp":
        server = toolset.label(str(label))
        if server is None:
            raise InvalidRequestError(
                "tool_choice names an MCP server that is not among tools.",
                param="tool_choice.server_label",
            )
        if server.failure is not None:  # the cause, not "offers no tool"
            raise ToolServerError(server.failure, param=server.where)
        if not isinstance(name, str):
            return body.model_copy(update={"tool_choice": "required"})
        flat = qualified_name(server.label, name)
        if flat not in toolset.offered:
            raise InvalidRequestError(
                f"MCP server '{label}' offers no tool '{name}'.", param="tool_choice.name"
            )
        return body.model_copy(update={"tool_choice": {"type": "function", "name": flat}})
    if any(s.kind == kind for s in toolset.stand_ins):
        return body.model_copy(update={"tool_choice": {"type": "function", "name": kind}})
    return body


def _listing(server: HostedServer) -> McpListToolsItem:
    tools = [
        McpListedTool(
            name=t.name,
            description=t.description,
            input_schema=dict(t.input_schema),
            annotations=dict(t.annotations) if t.annotations is not None else None,
        )
        for t in server.tools
    ]
    return McpListToolsItem(server_label=server.label, tools=tools, error=server.failure)


# --- the items of a run ------------------------------------------------------------------


def lead(call: ResponsesCall) -> None:
    """The items the gateway adds before the model's last answer, from what the hosted
    loop did: the servers' listings, the calls the input approved, then per round the
    model's text and its hosted calls (run, or waiting for approval)."""
    run = call.hosted
    assert run is not None, "a call with hosted tools"
    leading: list[OutputItem] = list(call.listed)
    limit = run.toolset.max_result_chars
    for record in run.approved:
        item = record_item(record, limit)
        if item is not None:
            item.id = f"mcp_{(record.approval or '').removeprefix('mcpr_')}"
            leading.append(item)
    for round_ in run.rounds:
        if round_.said:
            leading.append(OutputMessage(content=[OutputText(text=round_.said)]))
        leading.extend(i for i in (record_item(r, limit) for r in round_.calls) if i is not None)
    call.leading = leading
    call.stopped = "max_tool_calls" if run.stopped else None


def record_item(record: CallRecord, limit: int) -> OutputItem | None:
    """The item of one hosted call: an ``mcp_call`` that ran, an approval request, or
    nothing for a call past the bound."""
    offered = record.offered
    if offered is None or record.state == "dropped":
        return None
    if record.state == "waits":
        arguments = record.call.function.arguments
        return McpApprovalRequestItem(
            server_label=offered.label, name=offered.name, arguments=arguments
        )
    assert record.outcome is not None
    return call_item(offered, record.call, record.outcome, limit, record.approval)


def call_item(
    offered: Offered, call: ToolCall, outcome: Outcome, limit: int, approval: str | None = None
) -> McpCallItem:
    """The ``mcp_call`` item of a call that ran (or could not); its output cut at
    ``limit`` characters, as the model reads it."""
    error: dict[str, Any] | None = None
    output: str | None = None
    if outcome.error is not None:
        error = {
            "type": "http_error",
            "code": outcome.error.status_code,
            "message": outcome.error.message,
        }
    else:
        assert outcome.result is not None
        output = outcome.text(limit)
        if outcome.result.is_error:
            error = {"type": "mcp_tool_execution_error", "content": [_text(output)]}
    return McpCallItem(
        id=call.id,
        status="failed" if outcome.failed else "completed",
        server_label=offered.label,
        name=offered.name,
        arguments=call.function.arguments,
        output=output,
        error=error,
        approval_request_id=approval,
    )


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def needs_approval(offered: Offered) -> bool:
    return offered.server is not None and offered.server.approval.required(offered.tool)
