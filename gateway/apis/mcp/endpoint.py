"""``/mcp``: the gateway as one MCP server (streamable HTTP) offering the tools of the MCP
servers it fronts, to a client holding a gateway key (``Authorization: Bearer`` or
``x-api-key``; the key never travels upstream). The spine has checked the key, taken the
call from the key's request limit and read the body within its bound before this runs.

Both protocol eras are served on the one endpoint, as the ``MCP-Protocol-Version`` header
says:

* 2025 revisions (up to 2025-11-25): ``initialize`` issues a signed ``Mcp-Session-Id``
  (:mod:`gateway.apis.mcp.sessions`) that later requests must carry (400 without, 404 for
  one unknown, ended or of another key); ``DELETE`` ends it.
* 2026-07-28 (stateless): no handshake and no session; every request carries its version
  in the header and in ``params._meta``, checked by the SDK's own rules
  (:func:`mcp.shared.inbound.classify_inbound_request`).

``POST`` takes one JSON-RPC message and answers ``application/json``, or one SSE event when
the client accepts only ``text/event-stream``; notifications and responses get 202, and
anything else that is not a request is a 400. ``GET`` is 405: the gateway never starts a
stream of its own. A browser ``Origin`` must be this machine's, the request's own host, or
one listed under ``cors.allow_origins`` (DNS rebinding).
"""

from __future__ import annotations

from typing import Any

import orjson
import structlog
from mcp.shared.inbound import (
    ERROR_CODE_HTTP_STATUS,
    MCP_PROTOCOL_VERSION_HEADER,
    InboundLadderRejection,
    classify_inbound_request,
)
from mcp_types import INVALID_REQUEST, PARSE_ERROR
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from gateway.admission.keys import ANONYMOUS, KeyInfo
from gateway.apis.contract import Exchange, Reply
from gateway.apis.mcp.rpc import Call, RpcError, answer
from gateway.apis.mcp.state import McpState
from gateway.common.origins import loopback_origin
from gateway.errors import GatewayError
from gateway.mcp.hub import ToolCaller, ToolGrant

log = structlog.get_logger("shunter.mcp")
SESSION_HEADER = "mcp-session-id"


class Refusal(GatewayError):
    """The request is answered with a JSON-RPC ``error`` at an HTTP status."""

    def __init__(self, status: int, error: RpcError, headers: dict[str, str] | None = None):
        super().__init__(error.message)
        self.status, self.error, self.extra = status, error, headers or {}

    def headers(self) -> dict[str, str]:
        return {**super().headers(), **self.extra}


async def serve_post(exchange: Exchange) -> Reply:
    """One JSON-RPC message."""
    _check_origin(exchange)
    sse = _wants_sse(exchange.headers.get("accept"))
    message = _message(exchange.body)
    if "method" not in message or "id" not in message:  # a notification, or a response
        return Reply(b"", status=202)
    request_id = message["id"]
    if isinstance(request_id, bool) or not isinstance(request_id, (str, int)):
        raise Refusal(400, RpcError(INVALID_REQUEST, "The id must be a string or a number."))
    extra: dict[str, str] = {}
    method = str(message["method"])
    exchange.facts["rpc"] = method[:64]
    try:
        call = await _call(exchange, message, extra)
        result = await answer(call, method, message.get("params") or {})
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "result": result}
        status = 200
    except RpcError as error:
        reply = {"jsonrpc": "2.0", "id": request_id, "error": error.to_json()}
        version = exchange.headers.get(MCP_PROTOCOL_VERSION_HEADER)
        modern = version not in (None, *HANDSHAKE_PROTOCOL_VERSIONS)
        status = ERROR_CODE_HTTP_STATUS.get(error.code, 200) if modern else 200
    if sse and status == 200:
        frame = b"event: message\ndata: " + orjson.dumps(reply) + b"\n\n"
        return Reply(frame, extra | {"cache-control": "no-cache"}, 200, "text/event-stream")
    return Reply(orjson.dumps(reply), extra, status)


async def serve_delete(exchange: Exchange) -> Reply:
    """End a 2025-era session."""
    _check_origin(exchange)
    session = exchange.headers.get(SESSION_HEADER)
    if session is None:
        raise Refusal(400, RpcError(INVALID_REQUEST, "Name the session to end (Mcp-Session-Id)."))
    state: McpState = exchange.services.of("mcp")
    if not await state.sessions.end(session, exchange.key.id):
        raise Refusal(404, RpcError(INVALID_REQUEST, "Session not found."))
    return Reply(b"")


async def _call(exchange: Exchange, message: dict[str, Any], extra: dict[str, str]) -> Call:
    """The request's era checked (a session, or the stateless envelope): how to answer it."""
    key: KeyInfo = exchange.key
    hub = exchange.services.hosted.hub
    if hub is None:
        raise RpcError(INVALID_REQUEST, "This gateway fronts no MCP servers.")
    caller = ToolCaller(
        key_id=None if key is ANONYMOUS else key.id,
        grant=ToolGrant.of(key.mcp),
        request_id=exchange.request_id,
    )
    headers = dict(exchange.headers)
    version = headers.get(MCP_PROTOCOL_VERSION_HEADER)
    if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
        route = classify_inbound_request(message, headers=headers)
        if isinstance(route, InboundLadderRejection):
            raise RpcError(route.code, route.message, route.data)
        return Call(hub, caller, route.protocol_version, modern=True)
    state: McpState = exchange.services.of("mcp")
    if message["method"] == "initialize":
        extra["mcp-session-id"] = await state.sessions.issue(key.id)
    else:
        session = headers.get(SESSION_HEADER)
        if session is None:
            raise Refusal(
                400, RpcError(INVALID_REQUEST, "Mcp-Session-Id is required: initialize first.")
            )
        if not await state.sessions.check(session, key.id):
            raise Refusal(404, RpcError(INVALID_REQUEST, "Session not found: initialize again."))
    return Call(hub, caller, version or "2025-03-26", modern=False)


def _message(raw: bytes) -> dict[str, Any]:
    """One JSON-RPC 2.0 message: a request, a notification or a response (a 400 for
    anything else: a batch, a message with neither method nor result)."""
    try:
        message = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise Refusal(400, RpcError(PARSE_ERROR, "Parse error: the body is not JSON.")) from exc
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        raise Refusal(400, RpcError(INVALID_REQUEST, "Send one JSON-RPC 2.0 message (no batches)."))
    params = message.get("params")
    if params is not None and not isinstance(params, dict):
        raise Refusal(400, RpcError(INVALID_REQUEST, "params must be an object."))
    method = message.get("method")
    if method is not None and not isinstance(method, str):
        raise Refusal(400, RpcError(INVALID_REQUEST, "method must be a string."))
    is_response = "id" in message and ("result" in message or "error" in message)
    if method is None and not is_response:
        raise Refusal(
            400,
            RpcError(
                INVALID_REQUEST,
                "A message needs a method (a request or notification), "
                "or an id with a result or error (a response).",
            ),
        )
    return message


def _check_origin(exchange: Exchange) -> None:
    """A browser page may call only from this machine, the host it asks, or a listed origin."""
    origin = exchange.headers.get("origin")
    if origin is None:
        return
    raw = origin.encode("latin-1")
    host = exchange.headers.get("host")
    same_host = host is not None and origin.partition("://")[2] == host
    listed = origin in exchange.gateway.config.cors.listed_origins
    if not (same_host or listed or loopback_origin(raw)):
        raise Refusal(403, RpcError(INVALID_REQUEST, f"Origin not allowed: {origin[:200]}"))


def _wants_sse(accept: str | None) -> bool:
    """Whether the client accepts an SSE stream and not plain JSON."""
    if accept is None:
        return False
    kinds = {part.split(";")[0].strip().lower() for part in accept.split(",")}
    if kinds & {"application/json", "application/*", "*/*"}:
        return False
    if "text/event-stream" in kinds:
        return True
    raise Refusal(406, RpcError(INVALID_REQUEST, "Accept application/json or text/event-stream."))


def mcp_error(error: GatewayError, status: int, request_id: str | None) -> tuple[int, bytes]:
    """A refusal as a JSON-RPC error (``data``: the gateway's status and code)."""
    if isinstance(error, Refusal):
        body = {"jsonrpc": "2.0", "id": None, "error": error.error.to_json()}
        return error.status, orjson.dumps(body)
    data = {"status": status, "code": error.code}
    rpc = RpcError(INVALID_REQUEST, error.message, data)
    return status, orjson.dumps({"jsonrpc": "2.0", "id": None, "error": rpc.to_json()})
