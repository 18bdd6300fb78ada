"""The JSON-RPC methods ``/mcp`` answers, over the app's :class:`~gateway.mcp.hub.ToolHub`:
``initialize``, ``server/discover``, ``ping``, ``tools/list`` (every server's tools under
qualified names; the servers that failed named in the result's ``_meta`` rather than failing
the list) and ``tools/call`` (routed by qualified name, the caller's grant enforced).

A tool's own error is a result with ``isError``; a call that cannot be made (unknown tool,
not allowed, a server that failed or timed out) is a JSON-RPC error whose ``data`` carries
the gateway's status and code.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    SERVER_INFO_META_KEY,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from gateway.errors import GatewayError
from gateway.mcp.hub import McpTool, ToolCaller, ToolHub, ToolResult

SERVER_INFO = {"name": "shunter", "version": "1"}
LATEST_HANDSHAKE = HANDSHAKE_PROTOCOL_VERSIONS[-1]
SUPPORTED = (*HANDSHAKE_PROTOCOL_VERSIONS, *MODERN_PROTOCOL_VERSIONS)
FAILURES_META_KEY = "shunter/serverFailures"
"""Where a listing names the servers that could not be listed (in the result's ``_meta``)."""
TOOL_NOT_ALLOWED = -32003
"""The caller's grant does not include the tool (a code of the implementation's range)."""
_CAPABILITIES = {"tools": {"listChanged": False}}


class RpcError(Exception):
    """A JSON-RPC error to answer with."""

    def __init__(self, code: int, message: str, data: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data

    def to_json(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = dict(self.data)
        return error


@dataclass(frozen=True)
class Call:
    """One request: who asks, in which protocol revision (``modern``: 2026-07-28, whose
    results carry ``resultType``), and the hub to ask."""

    hub: ToolHub
    caller: ToolCaller
    version: str
    modern: bool


async def answer(call: Call, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The result of ``method``, or :class:`RpcError`."""
    if method == "initialize" and not call.modern:
        result = _initialize(params)
    elif method == "server/discover":
        result = {
            "supportedVersions": list(SUPPORTED),
            "capabilities": _CAPABILITIES,
            "ttlMs": 0,
            "cacheScope": "private",
        }
    elif method == "ping":
        result = {}
    elif method == "tools/list":
        result = await _list(call)
    elif method == "tools/call":
        result = await _call(call, params)
    else:
        raise RpcError(METHOD_NOT_FOUND, f"Method not found: {method[:100]}")
    if call.modern:
        result.setdefault("resultType", "complete")
        result.setdefault("_meta", {})[SERVER_INFO_META_KEY] = SERVER_INFO
    return result


def _initialize(params: Mapping[str, Any]) -> dict[str, Any]:
    asked = params.get("protocolVersion")
    version = asked if asked in HANDSHAKE_PROTOCOL_VERSIONS else LATEST_HANDSHAKE
    return {
        "protocolVersion": version,
        "capabilities": _CAPABILITIES,
        "serverInfo": SERVER_INFO,
        "instructions": "Tools of the MCP servers behind this gateway, named <server>__<tool>.",
    }


async def _list(call: Call) -> dict[str, Any]:
    listing = await call.hub.list_tools(call.caller)
    result: dict[str, Any] = {"tools": [_tool_json(t) for t in listing.tools]}
    if call.modern:
        result.update(ttlMs=0, cacheScope="private")  # the listing depends on the key
    if listing.failures:
        failures = [{"server": f.server, "message": f.message} for f in listing.failures]
        result["_meta"] = {FAILURES_META_KEY: failures}
    return result


def _tool_json(tool: McpTool) -> dict[str, Any]:
    shown: dict[str, Any] = {"name": tool.qualified, "inputSchema": dict(tool.input_schema)}
    if tool.description is not None:
        shown["description"] = tool.description
    if tool.annotations is not None:
        shown["annotations"] = dict(tool.annotations)
    return shown


async def _call(call: Call, params: Mapping[str, Any]) -> dict[str, Any]:
    name, arguments = params.get("name"), params.get("arguments") or {}
    if not isinstance(name, str) or not name:
        raise RpcError(INVALID_PARAMS, "tools/call needs params.name (a tool's name)")
    if not isinstance(arguments, Mapping):
        raise RpcError(INVALID_PARAMS, "params.arguments must be an object")
    where = call.hub.split(name)
    if where is None:
        raise RpcError(
            INVALID_PARAMS,
            f"Unknown tool: {name[:200]}",
            {"status": 404, "code": "tool_not_found"},
        )
    try:
        result = await call.hub.call_tool(call.caller, where[0], where[1], arguments)
    except GatewayError as exc:
        raise _rpc_error(exc) from exc
    return _result_json(result)


def _result_json(result: ToolResult) -> dict[str, Any]:
    shown: dict[str, Any] = {"content": [dict(b) for b in result.content]}
    if result.structured is not None:
        shown["structuredContent"] = dict(result.structured)
    if result.is_error:
        shown["isError"] = True
    return shown


def _rpc_error(exc: GatewayError) -> RpcError:
    data = {"status": exc.status_code, "code": exc.code}
    if exc.code == "tool_not_allowed":
        return RpcError(TOOL_NOT_ALLOWED, exc.message, data)
    if exc.status_code == 404:
        return RpcError(INVALID_PARAMS, exc.message, data)
    return RpcError(INTERNAL_ERROR, exc.message, data)
