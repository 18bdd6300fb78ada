"""MCP: ``/mcp``, the gateway as one MCP server over the servers it fronts
(:mod:`~.endpoint`, its methods in :mod:`~.rpc`, its 2025-era sessions in
:mod:`~.sessions`). Errors are JSON-RPC errors; the key comes in ``Authorization: Bearer``
or ``x-api-key``."""

from __future__ import annotations

from gateway.apis.contract import Api, KeySources, Operation
from gateway.apis.mcp.endpoint import MAX_BODY_BYTES, mcp_error, serve_delete, serve_post
from gateway.apis.mcp.state import McpState


def api() -> Api:
    return Api(
        name="mcp",
        operations=(
            Operation("mcp", "/mcp", ("POST",), handler=serve_post, max_body=MAX_BODY_BYTES),
            Operation("mcp", "/mcp", ("DELETE",), handler=serve_delete, json_body=False),
        ),
        errors=mcp_error,
        keys=KeySources(headers=("authorization", "x-api-key")),
        prefixes=("/mcp",),
        services=McpState.of,
    )
