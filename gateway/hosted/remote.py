"""An MCP server a request names by URL (only where ``hosted.request_servers`` allows it),
reached over streamable HTTP for the length of that request: one connection per listing
or call, bounded by ``hosted.request_server_timeout_s``.

The caller's own headers (``headers``, ``authorization``, ``authorization_token``) go to
that server and nowhere else; the gateway's credentials never do.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx2
import mcp_types
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from gateway.mcp.hub import (
    ServerFailure,
    ToolCaller,
    ToolListing,
    ToolResult,
    ToolServerError,
)
from gateway.mcp.upstream import all_tools, listed_tool

MAX_LIST_PAGES = 20
CLIENT_INFO = mcp_types.Implementation(name="shunter", version="1")


@dataclass
class RemoteServer:
    """One server of one request: ``name`` is the request's label for it."""

    name: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 30.0

    @property
    def servers(self) -> Sequence[str]:
        return (self.name,)

    def split(self, qualified: str) -> tuple[str, str] | None:
        server, _, tool = qualified.partition("__")
        return (server, tool) if server == self.name and tool else None

    async def list_tools(
        self, caller: ToolCaller, servers: Sequence[str] | None = None
    ) -> ToolListing:
        """Its tools (the caller's grant does not name request servers: all of them)."""
        try:
            async with self._client("tools/list") as client:
                tools = await all_tools(client, MAX_LIST_PAGES)
        except ToolServerError as exc:
            return ToolListing((), (ServerFailure(self.name, exc.message),))
        return ToolListing([listed_tool(self.name, tool) for tool in tools])

    async def call_tool(
        self, caller: ToolCaller, server: str, tool: str, arguments: Mapping[str, Any]
    ) -> ToolResult:
        async with self._client("tools/call") as client:
            result = await client.call_tool(tool, dict(arguments))
        content = [
            b.model_dump(mode="json", by_alias=True, exclude_none=True) for b in result.content
        ]
        return ToolResult(content, result.structured_content, bool(result.is_error))

    @contextlib.asynccontextmanager
    async def _client(self, method: str) -> AsyncIterator[Client]:
        """A connected client, within the timeout; any failure a :class:`ToolServerError`."""
        what = f"MCP server '{self.name}' failed {method}"
        try:
            async with asyncio.timeout(self.timeout_s):
                async with httpx2.AsyncClient(headers=dict(self.headers)) as http:
                    transport = streamable_http_client(self.url, http_client=http)
                    async with Client(
                        transport, mode="auto", cache=None, client_info=CLIENT_INFO
                    ) as client:
                        yield client
        except TimeoutError as exc:
            raise ToolServerError(
                f"MCP server '{self.name}' did not answer {method} within {self.timeout_s:g}s."
            ) from exc
        except MCPError as exc:
            raise ToolServerError(f"{what}: {exc.error.message[:300]}") from exc
        except ToolServerError:
            raise
        except Exception as exc:  # refused, reset, not an MCP server
            raise ToolServerError(f"{what}: {_describe(exc)}") from exc


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _describe(exc.exceptions[0])
    if isinstance(exc, MCPError):
        return exc.error.message[:300]
    return type(exc).__name__
