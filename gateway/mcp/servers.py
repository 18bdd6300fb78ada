""":class:`McpHub`: the :class:`~gateway.mcp.hub.ToolHub` of one config's ``mcp:`` section.

It keeps one supervised :class:`~gateway.mcp.upstream.Upstream` per configured server,
lists their tools concurrently (a server that fails is a :class:`ServerFailure`, never the
whole listing's failure), applies the caller's grant to listing and calling alike, and
accounts every call (:class:`~gateway.mcp.accounting.ToolAccounting`).

The app makes one per config (``create_app``: started and closed with its lifespan; a
reloaded config with another ``mcp:`` section replaces it, see :class:`HubSlot`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import orjson
import structlog

from gateway.config.mcp import McpSettings
from gateway.mcp.accounting import CallRecord, ToolAccounting
from gateway.mcp.hub import (
    SEPARATOR,
    McpTool,
    ServerFailure,
    ToolCaller,
    ToolListing,
    ToolNotAllowedError,
    ToolNotFoundError,
    ToolResult,
    ToolServerError,
)

if TYPE_CHECKING:
    from gateway.mcp.upstream import Upstream

log = structlog.get_logger("shunter.mcp")


class McpHub:
    """The configured MCP servers, as callers may use them (a :class:`ToolHub`)."""

    def __init__(self, settings: McpSettings, accounting: ToolAccounting | None = None) -> None:
        self.settings = settings
        self.accounting = accounting or ToolAccounting()
        self._upstreams = _upstreams(settings)
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def servers(self) -> Sequence[str]:
        return list(self._upstreams)

    def start(self) -> None:
        """Connect to every server (start the stdio ones) in the background."""
        for upstream in self._upstreams.values():
            upstream.start()

    async def aclose(self) -> None:
        """Disconnect from every server and stop the processes started."""
        await asyncio.gather(*(u.aclose() for u in self._upstreams.values()))

    async def retire(self) -> None:
        """Close once the calls in flight are done (or their longest timeout passed)."""
        longest = max((s.timeout_s for s in self.settings.servers.values()), default=0.0)
        try:
            await asyncio.wait_for(self._idle.wait(), longest + 1.0)
        except TimeoutError:
            log.warning("mcp_hub_retired_busy", in_flight=self._in_flight)
        await self.aclose()

    def upstream(self, server: str) -> Upstream | None:
        """The connection to ``server`` (its restarts, say), if configured."""
        return self._upstreams.get(server)

    def split(self, qualified: str) -> tuple[str, str] | None:
        server, sep, tool = qualified.partition(SEPARATOR)
        if not sep or not tool or server not in self._upstreams:
            return None
        return server, tool

    async def list_tools(
        self, caller: ToolCaller, servers: Sequence[str] | None = None
    ) -> ToolListing:
        names = [
            name
            for name in (self._upstreams if servers is None else servers)
            if name in self._upstreams and caller.grant.allows_server(name)
        ]
        listed = await asyncio.gather(*(self._list_one(name) for name in names))
        tools: list[McpTool] = []
        failures: list[ServerFailure] = []
        for found in listed:
            if isinstance(found, ServerFailure):
                failures.append(found)
            else:
                tools.extend(t for t in found if caller.grant.allows(t.server, t.name))
        return ToolListing(tools=tools, failures=failures)

    async def _list_one(self, server: str) -> Sequence[McpTool] | ServerFailure:
        try:
            return await self._upstreams[server].list_tools()
        except ToolServerError as exc:
            self.accounting.list_failed(server)
            log.warning("mcp_list_failed", server=server, error=exc.message)
            return ServerFailure(server, exc.message)

    async def call_tool(
        self, caller: ToolCaller, server: str, tool: str, arguments: Mapping[str, Any]
    ) -> ToolResult:
        upstream = self._upstreams.get(server)
        known = upstream.known_tool(tool) if upstream is not None else False
        record = CallRecord(
            server=server if upstream is not None else "unknown",
            tool=tool,
            key_id=caller.key_id or "anonymous",
            request_id=caller.request_id,
            known_tool=bool(known),
        )
        self._in_flight += 1
        self._idle.clear()
        try:
            with self.accounting.call(record):
                return await self._call(caller, server, record, arguments)
        finally:
            self._in_flight -= 1
            if not self._in_flight:
                self._idle.set()

    async def _call(
        self,
        caller: ToolCaller,
        server: str,
        record: CallRecord,
        arguments: Mapping[str, Any],
    ) -> ToolResult:
        tool, upstream = record.tool, self._upstreams.get(server)
        if upstream is None:
            raise ToolNotFoundError(f"No MCP server is named '{_shown(server)}'.", param="name")
        if not caller.grant.allows(server, tool):
            raise ToolNotAllowedError(
                f"This API key may not use the tool '{_shown(tool)}' of the MCP server '{server}'.",
                param="name",
            )
        if not await self._offers(upstream, tool):
            raise ToolNotFoundError(
                f"The MCP server '{server}' has no tool '{_shown(tool)}'.", param="name"
            )
        record.known_tool = True
        record.bytes_out = len(orjson.dumps(arguments))
        result = await upstream.call_tool(tool, arguments, caller.key_id or "anonymous")
        record.bytes_in = len(orjson.dumps([*result.content, result.structured]))
        if result.is_error:
            record.outcome = "tool_error"
        return result

    async def _offers(self, upstream: Upstream, tool: str) -> bool:
        """Whether the server offers ``tool`` (its listing, kept a while, filtered by the
        config)."""
        return any(t.name == tool for t in await upstream.list_tools())


def _shown(text: str, limit: int = 128) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _upstreams(settings: McpSettings) -> dict[str, Upstream]:
    """One connection per configured server; with none, the MCP library stays unloaded."""
    if not settings.servers:
        return {}
    from gateway.mcp.upstream import Upstream

    return {
        name: Upstream(name, server, settings.list_ttl_s)
        for name, server in settings.servers.items()
    }


class HubSlot:
    """The app's current hub. A reloaded config whose ``mcp:`` section differs gets a new
    hub at once; the old one is closed when its calls in flight are done."""

    def __init__(self, settings: McpSettings, accounting: ToolAccounting) -> None:
        self.accounting = accounting
        self.hub = McpHub(settings, accounting)
        self._retiring: dict[asyncio.Task[None], McpHub] = {}

    def start(self) -> None:
        self.hub.start()

    def apply(self, settings: McpSettings) -> None:
        """Use ``settings`` from now on (a no-op when they did not change)."""
        if settings == self.hub.settings:
            return
        old, self.hub = self.hub, McpHub(settings, self.accounting)
        self.hub.start()
        task = asyncio.create_task(old.retire(), name="mcp-hub-retire")
        self._retiring[task] = old
        task.add_done_callback(lambda done: self._retiring.pop(done, None))
        log.info("mcp_reconfigured", servers=sorted(settings.servers))

    async def aclose(self) -> None:
        """Close the hub, and the ones still retiring, now."""
        retiring = list(self._retiring.items())
        for task, _ in retiring:
            task.cancel()
        await asyncio.gather(*(task for task, _ in retiring), return_exceptions=True)
        await asyncio.gather(self.hub.aclose(), *(hub.aclose() for _, hub in retiring))
