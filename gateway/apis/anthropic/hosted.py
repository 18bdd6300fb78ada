"""Hosted tools of ``/v1/messages`` on the translated path: Anthropic's MCP connector
(``mcp_servers``, with the ``anthropic-beta: mcp-client-...`` header) and stand-ins for its
server tools (``web_search_20250305``...), run by the gateway.

A server of ``mcp_servers`` is a configured one when its ``name`` or ``url`` is (the
gateway's own credentials then apply, and the caller's grant); otherwise, where
``hosted.request_servers`` allows it, the request's own (its ``authorization_token`` goes
to it as a bearer token). Its tools are offered to the model as client tools named
``<name>__<tool>``, so ``tool_choice`` may name one; the calls the model makes come back
as ``mcp_tool_use`` and ``mcp_tool_result`` blocks before the model's last answer. A
deployment that speaks Messages itself gets the request as sent and runs the connector
itself.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from gateway.admission.keys import KeyInfo
from gateway.apis.anthropic.translation import MessagesCall
from gateway.errors import InvalidRequestError
from gateway.hosted.context import HostedContext
from gateway.hosted.run import HostedRun
from gateway.hosted.toolset import HostedServer, Outcome, Toolset
from gateway.protocol.chat import ToolCall
from gateway.protocol.messages import MessagesRequest, ToolParam
from gateway.protocol.messages_codec import tool_input
from gateway.protocol.validation import request_error


class ToolConfiguration(BaseModel):
    """What ``tool_configuration`` allows of a server's tools."""

    model_config = ConfigDict(extra="forbid", strict=True)

    enabled: bool = True
    allowed_tools: list[str] | None = None


class McpServerParam(BaseModel):
    """One of ``mcp_servers``, as Anthropic's connector takes it."""

    model_config = ConfigDict(extra="forbid", strict=True)

    type: Literal["url"]
    url: str
    name: str
    authorization_token: str | None = None
    tool_configuration: ToolConfiguration | None = None


def stand_in_kind(tool: ToolParam, kinds: frozenset[str]) -> str | None:
    """The stand-in an Anthropic server tool (``web_search_20250305``) asks for, if any."""
    if tool.type is None or tool.type == "custom":
        return None
    kind = tool.type.rsplit("_", 1)[0]
    return kind if kind in kinds else None


async def prepare(
    call: MessagesCall, context: HostedContext, key: KeyInfo, request_id: str
) -> None:
    """Resolve and list the request's hosted tools into ``call``: its ``hosted`` toolset,
    and its body as the translation reads it (the servers' tools as client tools)."""
    body = call.body
    given = (body.model_extra or {}).get("mcp_servers") if context.runs_mcp else None
    kinds = context.stand_in_kinds()
    toolset = Toolset(context.caller(key, body.model, request_id))
    toolset.max_calls = context.settings.max_tool_calls
    toolset.max_result_chars = context.settings.max_result_chars
    if given is not None:
        if not isinstance(given, list):
            raise InvalidRequestError("mcp_servers must be a list.", param="mcp_servers")
        for i, server in enumerate(given):
            resolved = _server(server, f"mcp_servers[{i}]", context)
            if resolved is not None:
                toolset.servers.append(resolved)
    kept: list[ToolParam] = []
    for k, tool in enumerate(body.tools or ()):
        kind = stand_in_kind(tool, kinds)
        if kind is None:
            kept.append(tool)
        else:
            toolset.stand_ins.append(context.stand_in(kind, f"tools[{k}]"))
    if given is None and not toolset.stand_ins:
        return
    toolset.refuse_ungranted()
    await toolset.list()
    call.hosted = HostedRun(toolset, "per_round")
    call.body = _offered(body, kept, toolset)


def _server(given: Any, where: str, context: HostedContext) -> HostedServer | None:
    try:
        server = McpServerParam.model_validate(given)
    except ValidationError as exc:
        error = request_error(exc)
        error.param = f"{where}.{error.param}" if error.param else where
        raise error from None
    config = server.tool_configuration or ToolConfiguration()
    if not config.enabled:
        return None
    allowed = frozenset(config.allowed_tools) if config.allowed_tools is not None else None
    configured = context.configured(server.name, None) or context.configured(None, server.url)
    if configured is not None and context.hub is not None:
        return HostedServer(server.name, configured, context.hub, f"{where}.name", allowed)
    headers = {}
    if server.authorization_token:
        headers["authorization"] = f"Bearer {server.authorization_token}"
    remote = context.remote(server.name, server.url, headers, f"{where}.url")
    return HostedServer(server.name, server.name, remote, f"{where}.name", allowed)


def _offered(body: MessagesRequest, kept: list[ToolParam], toolset: Toolset) -> MessagesRequest:
    """``body`` without ``mcp_servers`` and the stand-ins' server tools, the hosted tools
    offered as client tools instead."""
    tools = list(kept)
    for function in toolset.functions():
        about = function["function"]
        tools.append(
            ToolParam(
                name=about["name"],
                description=about.get("description"),
                input_schema=about["parameters"],
            )
        )
    offered = body.model_copy(update={"tools": tools or None})
    extra = {k: v for k, v in (body.model_extra or {}).items() if k != "mcp_servers"}
    object.__setattr__(offered, "__pydantic_extra__", extra)
    return offered


# --- the blocks of a run -----------------------------------------------------------------


def lead(call: MessagesCall) -> tuple[list[dict[str, Any]], str | None]:
    """The blocks the gateway adds before the model's last answer, from what the hosted
    loop did (per round: the model's text, each call's ``mcp_tool_use`` and
    ``mcp_tool_result``), and the ``stop_reason`` when the loop ended the turn
    (``pause_turn``: the bound of hosted calls was reached; the client may go on)."""
    run = call.hosted
    assert run is not None, "a call with hosted tools"
    blocks: list[dict[str, Any]] = []
    limit = run.toolset.max_result_chars
    for round_ in run.rounds:
        if round_.said:
            blocks.append({"type": "text", "text": round_.said})
        for record in round_.calls:
            if record.outcome is None:
                continue
            blocks.append(use_block(record.call, run.toolset))
            blocks.append(result_block(record.call.id, record.outcome, limit))
    return blocks, "pause_turn" if run.stopped else None


def use_block(call: ToolCall, toolset: Toolset) -> dict[str, Any]:
    """The ``mcp_tool_use`` block of a hosted call the model made."""
    offered = toolset.offered[call.function.name]
    return {
        "type": "mcp_tool_use",
        "id": call.id,
        "name": offered.name,
        "server_name": offered.label,
        "input": tool_input(call.function.arguments),
    }


def result_block(call_id: str, outcome: Outcome, limit: int) -> dict[str, Any]:
    """The ``mcp_tool_result`` block of a hosted call that ran (or could not): its text,
    cut at ``limit`` characters as the model reads it."""
    return {
        "type": "mcp_tool_result",
        "tool_use_id": call_id,
        "is_error": outcome.failed,
        "content": [{"type": "text", "text": outcome.text(limit)}],
    }
