"""MCP: ``/mcp``, the gateway as one MCP server over the servers it fronts
(:mod:`~.endpoint`, its methods in :mod:`~.rpc`, its 2025-era sessions in
:mod:`~.sessions`). Errors are JSON-RPC errors; the key comes in ``Authorization: Bearer``
or ``x-api-key``."""

from __future__ import annotations

from gateway.apis.contract import Api, Exchange, KeySources, Operation, Reply
from gateway.apis.mcp.state import McpState
from gateway.errors import GatewayError

MAX_BODY_BYTES = 4 * 1024 * 1024


# The endpoint and the MCP library it stands on load with the first request to /mcp: a
# gateway whose clients never call it pays for neither.
async def _post(exchange: Exchange) -> Reply:
    from gateway.apis.mcp.endpoint import serve_post

    return await serve_post(exchange)


async def _delete(exchange: Exchange) -> Reply:
    from gateway.apis.mcp.endpoint import serve_delete

    return await serve_delete(exchange)


def _error(error: GatewayError, status: int, request_id: str | None) -> tuple[int, bytes]:
    from gateway.apis.mcp.endpoint import mcp_error

    return mcp_error(error, status, request_id)


def api() -> Api:
    return Api(
        name="mcp",
        operations=(
            Operation("mcp", "/mcp", ("POST",), handler=_post, max_body=MAX_BODY_BYTES),
            Operation("mcp", "/mcp", ("DELETE",), handler=_delete, json_body=False),
        ),
        errors=_error,
        keys=KeySources(headers=("authorization", "x-api-key")),
        prefixes=("/mcp",),
        services=McpState.of,
    )
