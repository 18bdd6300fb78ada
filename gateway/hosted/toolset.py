"""The hosted tools of one request, whatever API it came in on: the MCP servers it names,
the tools each offers the model (as functions, under ``<label>__<tool>``), and how a call
the model makes is run.

A server is one the operator configured (the gateway's own credentials, the caller's grant
applies) or, where ``hosted.request_servers`` allows it, one the request names by URL
(:mod:`gateway.hosted.remote`). A stand-in (``web_search``) is one configured server's tool
offered under the provider tool's name.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.errors import GatewayError, InvalidRequestError
from gateway.mcp.hub import (
    McpTool,
    ServerFailure,
    ToolCaller,
    ToolHub,
    ToolNotAllowedError,
    ToolResult,
    qualified_name,
)

ApprovalMode = Literal["always", "never"]


@dataclass(frozen=True)
class Approval:
    """Which tools of a server wait for the client's approval: ``always`` / ``never``,
    else the tools of ``never`` run at once and all others wait (OpenAI's default:
    every call waits)."""

    mode: ApprovalMode | None = "always"
    always: frozenset[str] = frozenset()
    never: frozenset[str] = frozenset()

    def required(self, tool: str) -> bool:
        if tool in self.always:
            return True
        if tool in self.never:
            return False
        return self.mode != "never"


@dataclass
class HostedServer:
    """One server of the request, as the client labels it."""

    label: str
    server: str
    hub: ToolHub
    where: str
    """The request's field that named it (``tools[2]``, ``mcp_servers[0]``)."""
    allowed: frozenset[str] | None = None
    approval: Approval = field(default_factory=lambda: Approval("never"))
    tools: list[McpTool] = field(default_factory=list)
    failure: str | None = None
    listed: bool = False
    """Whether the tools were listed for this request (else: reused from earlier turns)."""


@dataclass(frozen=True)
class StandInTool:
    """A provider server tool (``web_search``) run as one configured server's tool."""

    kind: str
    server: str
    tool: str
    argument: str
    description: str
    max_length: int
    hub: ToolHub
    where: str

    @property
    def function(self) -> dict[str, Any]:
        parameters = {
            "type": "object",
            "properties": {self.argument: {"type": "string", "maxLength": self.max_length}},
            "required": [self.argument],
        }
        about = {"name": self.kind, "description": self.description, "parameters": parameters}
        return {"type": "function", "function": about}


@dataclass
class Offered:
    """What a function name the model may call stands for."""

    server: HostedServer | None
    tool: str
    stand_in: StandInTool | None = None

    @property
    def label(self) -> str:
        """The server's label as the items show it (a stand-in's configured server)."""
        if self.stand_in is not None:
            return self.stand_in.server
        assert self.server is not None
        return self.server.label

    @property
    def name(self) -> str:
        """The tool's own name on its server."""
        return self.stand_in.tool if self.stand_in is not None else self.tool


@dataclass
class Outcome:
    """A hosted call, once run: its result, or the failure that kept it from running."""

    result: ToolResult | None = None
    error: GatewayError | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None or (self.result is not None and self.result.is_error)

    def text(self, limit: int) -> str:
        """What the model reads of it."""
        if self.error is not None:
            return f"Error: {self.error.message}"
        assert self.result is not None
        said = self.result.text()
        return said if len(said) <= limit else said[:limit] + "\n[cut]"


@dataclass
class Toolset:
    """The hosted tools of one request, once listed."""

    caller: ToolCaller
    servers: list[HostedServer] = field(default_factory=list)
    stand_ins: list[StandInTool] = field(default_factory=list)
    max_calls: int = 16
    max_result_chars: int = 100_000
    calls: int = 0

    def __bool__(self) -> bool:
        return bool(self.servers or self.stand_ins)

    def label(self, label: str) -> HostedServer | None:
        return next((s for s in self.servers if s.label == label), None)

    @property
    def offered(self) -> dict[str, Offered]:
        """Each function name the model may call, and what it stands for."""
        named: dict[str, Offered] = {}
        for server in self.servers:
            for tool in server.tools:
                if server.allowed is None or tool.name in server.allowed:
                    named[qualified_name(server.label, tool.name)] = Offered(server, tool.name)
        for stand_in in self.stand_ins:
            named[stand_in.kind] = Offered(None, stand_in.kind, stand_in)
        return named

    def functions(self) -> list[dict[str, Any]]:
        """The chat tools the model is offered."""
        functions = []
        for server in self.servers:
            for tool in server.tools:
                if server.allowed is None or tool.name in server.allowed:
                    functions.append(_function(server.label, tool))
        functions.extend(stand_in.function for stand_in in self.stand_ins)
        return functions

    async def list(self) -> None:
        """List the tools of every server not listed yet (an unreachable one: its
        ``failure``, and no tools)."""
        for server in self.servers:
            if server.listed or server.tools:
                continue
            listing = await server.hub.list_tools(self.caller, [server.server])
            server.listed = True
            server.tools = [t for t in listing.tools if t.server == server.server]
            failure = _failure(listing.failures, server.server)
            if failure is not None:
                server.failure = failure
            elif server.allowed is not None:
                server.tools = [t for t in server.tools if t.name in server.allowed]

    async def call(self, name: str, arguments: str) -> Outcome:
        """Run the call of ``name`` (a function of :meth:`functions`) with ``arguments``
        (the model's JSON text)."""
        self.calls += 1
        offered = self.offered.get(name)
        if offered is None:
            return Outcome(error=GatewayError(f"There is no tool named '{name}'."))
        try:
            parsed = _arguments(arguments)
            if offered.stand_in is not None:
                stand_in = offered.stand_in
                given = {stand_in.argument: parsed.get(stand_in.argument, "")}
                result = await stand_in.hub.call_tool(
                    self.caller, stand_in.server, stand_in.tool, given
                )
            else:
                assert offered.server is not None
                server = offered.server
                result = await server.hub.call_tool(
                    self.caller, server.server, offered.tool, parsed
                )
        except GatewayError as exc:
            return Outcome(error=exc)
        return Outcome(result=result)

    def refuse_ungranted(self) -> None:
        """A configured server the caller's grant does not include: a 403 naming the
        request's field."""
        grant = self.caller.grant
        for server in self.servers:
            if not grant.allows_server(server.server):
                raise ToolNotAllowedError(
                    f"{server.where}: this key may not use the MCP server '{server.label}'.",
                    param=server.where,
                )
        for stand_in in self.stand_ins:
            if not grant.allows(stand_in.server, stand_in.tool):
                raise ToolNotAllowedError(
                    f"{stand_in.where}: this key may not use the tool '{stand_in.kind}'.",
                    param=stand_in.where,
                )


def _function(label: str, tool: McpTool) -> dict[str, Any]:
    about: dict[str, Any] = {"name": qualified_name(label, tool.name)}
    if tool.description:
        about["description"] = tool.description
    about["parameters"] = dict(tool.input_schema) or {"type": "object", "properties": {}}
    return {"type": "function", "function": about}


def _failure(failures: Sequence[ServerFailure], server: str) -> str | None:
    return next((f.message for f in failures if f.server == server), None)


def _arguments(given: str) -> Mapping[str, Any]:
    """The model's arguments as an object (empty text: none)."""
    if not given.strip():
        return {}
    try:
        parsed = json.loads(given)
    except ValueError:
        raise InvalidRequestError("The model's tool arguments are not JSON.") from None
    if not isinstance(parsed, dict):
        raise InvalidRequestError("The model's tool arguments are not a JSON object.")
    return parsed


def listed_tool(server: str, given: Mapping[str, Any]) -> McpTool | None:
    """A tool of an earlier ``mcp_list_tools`` item (``None`` when it is not one)."""
    name, schema = given.get("name"), given.get("input_schema")
    if not isinstance(name, str) or not isinstance(schema, dict):
        return None
    description = given.get("description")
    annotations = given.get("annotations")
    return McpTool(
        server=server,
        name=name,
        description=description if isinstance(description, str) else None,
        input_schema=schema,
        annotations=annotations if isinstance(annotations, dict) else None,
    )
