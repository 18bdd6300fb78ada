"""The contract between the MCP servers the gateway fronts and whoever uses their tools.

Two users: the ``/mcp`` endpoint (an MCP server itself, aggregating the configured ones for
MCP clients) and the hosted-tool loop of ``/v1/responses`` and ``/v1/messages`` (which
offers a model the tools as functions and runs the calls it makes). Both see one
:class:`ToolHub`: it lists and calls tools on behalf of a :class:`ToolCaller`, whose grant
decides which servers and tools it may see and call, and it accounts every call.

Names: a tool is offered as ``<server><SEPARATOR><tool>`` (:func:`qualified_name`), so tools
of two servers never collide; :meth:`ToolHub.split` maps the name back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.errors import GatewayError, NotFoundError, PermissionDeniedError

SEPARATOR = "__"
"""Between server and tool in a qualified tool name (MCP and OpenAI function names both
allow it)."""


def qualified_name(server: str, tool: str) -> str:
    """The name a tool of ``server`` is offered under."""
    return f"{server}{SEPARATOR}{tool}"


@dataclass(frozen=True)
class ToolGrant:
    """What a caller may use: ``None`` means everything; else the servers named, and within
    a server the tools named (a server mapped to ``None``: all of its tools)."""

    servers: Mapping[str, frozenset[str] | None] | None = None

    @classmethod
    def of(cls, entries: Iterable[str] | None) -> ToolGrant:
        """The grant an allow-list writes as ``server`` (all its tools) and
        ``server:tool`` entries; ``None``: everything."""
        if entries is None:
            return cls()
        servers: dict[str, set[str] | None] = {}
        for entry in entries:
            server, colon, tool = entry.partition(":")
            if not colon:
                servers[server] = None
            elif server not in servers:
                servers[server] = {tool}
            else:
                named = servers[server]
                if named is not None:  # None: the whole server is granted already
                    named.add(tool)
        return cls({s: None if t is None else frozenset(t) for s, t in servers.items()})

    @classmethod
    def of_mapping(cls, grant: Mapping[str, Sequence[str] | None] | None) -> ToolGrant:
        """The grant a config writes as ``{server: [tool, ...] | null}``; ``None``: all."""
        if grant is None:
            return cls()
        return cls({s: None if t is None else frozenset(t) for s, t in grant.items()})

    def narrowed(self, other: ToolGrant) -> ToolGrant:
        """What both grants allow (a key's grant narrowed by a model group's)."""
        if other.servers is None:
            return self
        if self.servers is None:
            return other
        servers: dict[str, frozenset[str] | None] = {}
        for server, tools in self.servers.items():
            if server not in other.servers:
                continue
            theirs = other.servers[server]
            if tools is None:
                servers[server] = theirs
            else:
                servers[server] = tools if theirs is None else tools & theirs
        return ToolGrant(servers)

    def allows_server(self, server: str) -> bool:
        """May the caller see ``server`` at all?"""
        return self.servers is None or server in self.servers

    def allows(self, server: str, tool: str) -> bool:
        """May the caller list and call ``tool`` of ``server``?"""
        if self.servers is None:
            return True
        if server not in self.servers:
            return False
        tools = self.servers[server]
        return tools is None or tool in tools


@dataclass(frozen=True)
class ToolCaller:
    """Who asks: the gateway key's id (``None`` in open mode), its grant, and the model
    group whose grant narrows it further (hosted tools only)."""

    key_id: str | None
    grant: ToolGrant = field(default_factory=ToolGrant)
    request_id: str = ""


@dataclass(frozen=True)
class McpTool:
    """One tool as its server describes it (``inputSchema`` and all), plus where it lives."""

    server: str
    name: str
    description: str | None
    input_schema: Mapping[str, Any]
    annotations: Mapping[str, Any] | None = None

    @property
    def qualified(self) -> str:
        """The name it is offered under."""
        return qualified_name(self.server, self.name)


@dataclass(frozen=True)
class ServerFailure:
    """A server that could not be listed, and why (in words a client may read)."""

    server: str
    message: str


@dataclass(frozen=True)
class ToolListing:
    """The tools a caller may use, and the servers that did not answer."""

    tools: Sequence[McpTool]
    failures: Sequence[ServerFailure] = ()


@dataclass(frozen=True)
class ToolResult:
    """A ``tools/call`` result as MCP defines it: content blocks, optional structured
    content, and whether the tool itself reports an error (still a result, not a failure
    of the call)."""

    content: Sequence[Mapping[str, Any]]
    structured: Mapping[str, Any] | None = None
    is_error: bool = False

    def text(self) -> str:
        """The text of the result, as a model is fed it: the text blocks joined, other
        blocks as their JSON."""
        import json

        parts = []
        for block in self.content:
            if block.get("type") == "text":
                parts.append(str(block.get("text", "")))
            else:
                parts.append(json.dumps(block, separators=(",", ":")))
        if not parts and self.structured is not None:
            parts.append(json.dumps(self.structured, separators=(",", ":")))
        return "\n".join(parts)


class ToolNotAllowedError(PermissionDeniedError):
    """The caller's grant does not include the tool or server (403)."""

    default_code = "tool_not_allowed"


class ToolNotFoundError(NotFoundError):
    """No configured server has such a tool (404)."""

    default_code = "tool_not_found"


class ToolServerError(GatewayError):
    """The server failed, timed out or is unreachable (502; 504 for a timeout)."""

    status_code = 502
    default_code = "tool_server_error"
    counts_as_failure = True


class ToolServerTimeoutError(ToolServerError):
    """The server did not answer within its ``timeout_s`` (504)."""

    status_code = 504
    default_code = "tool_server_timeout"


class ToolHub(Protocol):
    """The MCP servers of one config, as a caller may use them."""

    @property
    def servers(self) -> Sequence[str]:
        """The configured server names."""

    async def list_tools(
        self, caller: ToolCaller, servers: Sequence[str] | None = None
    ) -> ToolListing:
        """The tools ``caller`` may use, of ``servers`` (all configured when ``None``);
        an unreachable server is a :class:`ServerFailure`, never an exception."""

    async def call_tool(
        self, caller: ToolCaller, server: str, tool: str, arguments: Mapping[str, Any]
    ) -> ToolResult:
        """Call ``tool`` of ``server``: :class:`ToolNotAllowedError`,
        :class:`ToolNotFoundError` or :class:`ToolServerError` when it cannot be called."""

    def split(self, qualified: str) -> tuple[str, str] | None:
        """``(server, tool)`` for a qualified name of a configured server, else ``None``."""
