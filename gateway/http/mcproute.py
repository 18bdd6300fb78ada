"""``/mcp``: the gateway as one MCP server (streamable HTTP) offering the tools of the MCP
servers it fronts, to a client holding a gateway key (``Authorization: Bearer`` or
``x-api-key``; the key never travels upstream).

Both protocol eras are served on the one endpoint, as the ``MCP-Protocol-Version`` header
says:

* 2025 revisions (up to 2025-11-25): ``initialize`` issues a signed ``Mcp-Session-Id``
  (:mod:`gateway.http.mcpsession`) that later requests must carry (400 without, 404 for one
  unknown, ended or of another key); ``DELETE`` ends it.
* 2026-07-28 (stateless): no handshake and no session; every request carries its version
  in the header and in ``params._meta``, checked by the SDK's own rules
  (:func:`mcp.shared.inbound.classify_inbound_request`).

``POST`` takes one JSON-RPC message (bounded) and answers ``application/json``, or one SSE
event when the client accepts only ``text/event-stream``; notifications and responses get
202. ``GET`` is 405: the gateway never starts a stream of its own. A browser ``Origin``
must be this machine's, the request's own host, or one listed under ``cors.allow_origins``
(DNS rebinding).
"""

from __future__ import annotations

import time
from typing import Any

import orjson
import structlog
from litestar import asgi
from litestar.exceptions import HTTPException
from litestar.types import Receive, Scope, Send
from mcp.shared.inbound import (
    ERROR_CODE_HTTP_STATUS,
    MCP_PROTOCOL_VERSION_HEADER,
    InboundLadderRejection,
    classify_inbound_request,
)
from mcp_types import INVALID_REQUEST, PARSE_ERROR
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from gateway.admission.keys import ANONYMOUS, KeyInfo
from gateway.errors import GatewayError
from gateway.http.cors import trusted_origins
from gateway.http.guard import loopback_origin
from gateway.http.intake import Services, credentials, read_body, taking_work
from gateway.http.mcprpc import Call, RpcError, answer
from gateway.http.mcpsession import McpSessions
from gateway.mcp.hub import ToolCaller, ToolGrant

log = structlog.get_logger("shunter.mcp")
MAX_BODY_BYTES = 4 * 1024 * 1024
SESSION_HEADER = "mcp-session-id"
_ALLOW = {"allow": "POST, DELETE"}


class _Refusal(Exception):
    """The request is answered with a JSON-RPC error at an HTTP status."""

    def __init__(self, status: int, error: RpcError, headers: dict[str, str] | None = None):
        super().__init__(error.message)
        self.status, self.error, self.headers = status, error, headers or {}


@asgi("/mcp", copy_scope=False)
async def mcp_endpoint(scope: Scope, receive: Receive, send: Send) -> None:
    started = time.perf_counter()
    method, status = str(scope.get("method")), 200
    try:
        _check_origin(scope)
        if method == "POST":
            status = await _post(scope, receive, send)
        elif method == "DELETE":
            status = await _delete(scope, send)
        else:
            raise _Refusal(405, RpcError(INVALID_REQUEST, "Use POST (or DELETE)."), _ALLOW)
    except _Refusal as refused:
        status = refused.status
        body = {"jsonrpc": "2.0", "id": None, "error": refused.error.to_json()}
        await _write(send, status, orjson.dumps(body), refused.headers)
    log.debug("mcp_http", method=method, status=status, ms=_ms(started))


async def _post(scope: Scope, receive: Receive, send: Send) -> int:
    headers = _headers(scope)
    if headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
        raise _Refusal(
            415, RpcError(INVALID_REQUEST, "Send JSON (Content-Type: application/json).")
        )
    sse = _wants_sse(headers.get("accept"))
    key = await _authenticated(scope)
    try:
        raw = await read_body(scope, receive, MAX_BODY_BYTES)
    except HTTPException as exc:
        raise _Refusal(exc.status_code, RpcError(INVALID_REQUEST, str(exc.detail))) from exc
    message = _message(raw)
    if "method" not in message or "id" not in message:  # a notification, or a response
        await _write(send, 202, b"", {})
        return 202
    request_id = message["id"]
    if isinstance(request_id, bool) or not isinstance(request_id, (str, int)):
        raise _Refusal(400, RpcError(INVALID_REQUEST, "The id must be a string or a number."))
    extra: dict[str, str] = {}
    try:
        call = await _call(scope, headers, message, key, extra)
        params = message.get("params") or {}
        result = await answer(call, str(message["method"]), params)
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "result": result}
        status = 200
    except RpcError as error:
        reply = {"jsonrpc": "2.0", "id": request_id, "error": error.to_json()}
        modern = headers.get(MCP_PROTOCOL_VERSION_HEADER) not in (
            None,
            *HANDSHAKE_PROTOCOL_VERSIONS,
        )
        status = ERROR_CODE_HTTP_STATUS.get(error.code, 200) if modern else 200
    log.info("mcp_request", rpc=str(message["method"])[:64], status=status, key_id=key.id)
    if sse and status == 200:
        frame = b"event: message\ndata: " + orjson.dumps(reply) + b"\n\n"
        await _write(send, 200, frame, extra, "text/event-stream")
    else:
        await _write(send, status, orjson.dumps(reply), extra)
    return status


async def _call(
    scope: Scope,
    headers: dict[str, str],
    message: dict[str, Any],
    key: KeyInfo,
    extra: dict[str, str],
) -> Call:
    """The request's era checked (a session, or the stateless envelope): how to answer it."""
    state = scope["app"].state
    caller = ToolCaller(
        key_id=None if key is ANONYMOUS else key.id,
        grant=ToolGrant.of(key.mcp),
        request_id=str(scope.get("state", {}).get("request_id", "")),
    )
    version = headers.get(MCP_PROTOCOL_VERSION_HEADER)
    if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
        route = classify_inbound_request(message, headers=headers)
        if isinstance(route, InboundLadderRejection):
            raise RpcError(route.code, route.message, route.data)
        return Call(state.mcp.hub, caller, route.protocol_version, modern=True)
    sessions: McpSessions = state.mcp_sessions
    if message["method"] == "initialize":
        extra["mcp-session-id"] = await sessions.issue(key.id)
    else:
        session = headers.get(SESSION_HEADER)
        if session is None:
            raise _Refusal(
                400, RpcError(INVALID_REQUEST, "Mcp-Session-Id is required: initialize first.")
            )
        if not await sessions.check(session, key.id):
            raise _Refusal(404, RpcError(INVALID_REQUEST, "Session not found: initialize again."))
    return Call(state.mcp.hub, caller, version or "2025-03-26", modern=False)


async def _delete(scope: Scope, send: Send) -> int:
    key = await _authenticated(scope)
    session = _headers(scope).get(SESSION_HEADER)
    if session is None:
        raise _Refusal(400, RpcError(INVALID_REQUEST, "Name the session to end (Mcp-Session-Id)."))
    if not await scope["app"].state.mcp_sessions.end(session, key.id):
        raise _Refusal(404, RpcError(INVALID_REQUEST, "Session not found."))
    await _write(send, 200, b"", {})
    return 200


async def _authenticated(scope: Scope) -> KeyInfo:
    """The caller's key; a refusal in JSON-RPC's shape at the gateway's status."""
    state = scope["app"].state
    try:
        taking_work(state.gateway)
        services: Services = state.services
        return await services.admission.authenticate(credentials(scope, x_api_key=True))
    except GatewayError as exc:
        extra = {"www-authenticate": "Bearer"} if exc.status_code == 401 else {}
        data = {"status": exc.status_code, "code": exc.code}
        raise _Refusal(
            exc.status_code, RpcError(INVALID_REQUEST, exc.message, data), extra
        ) from exc


def _message(raw: bytes) -> dict[str, Any]:
    try:
        message = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _Refusal(400, RpcError(PARSE_ERROR, "Parse error: the body is not JSON.")) from exc
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        raise _Refusal(
            400, RpcError(INVALID_REQUEST, "Send one JSON-RPC 2.0 message (no batches).")
        )
    params = message.get("params")
    if params is not None and not isinstance(params, dict):
        raise _Refusal(400, RpcError(INVALID_REQUEST, "params must be an object."))
    return message


def _check_origin(scope: Scope) -> None:
    """A browser page may call only from this machine, the host it asks, or a listed origin."""
    headers = _headers(scope)
    origin = headers.get("origin")
    if origin is None:
        return
    raw = origin.encode("latin-1")
    host = headers.get("host")
    same_host = host is not None and origin.partition("://")[2] == host
    listed = raw in trusted_origins(scope["app"].state.gateway.config.cors)
    if not (same_host or listed or loopback_origin(raw)):
        raise _Refusal(403, RpcError(INVALID_REQUEST, f"Origin not allowed: {origin[:200]}"))


def _wants_sse(accept: str | None) -> bool:
    """Whether the client accepts an SSE stream and not plain JSON."""
    if accept is None:
        return False
    kinds = {part.split(";")[0].strip().lower() for part in accept.split(",")}
    if kinds & {"application/json", "application/*", "*/*"}:
        return False
    if "text/event-stream" in kinds:
        return True
    raise _Refusal(406, RpcError(INVALID_REQUEST, "Accept application/json or text/event-stream."))


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


async def _write(
    send: Send, status: int, body: bytes, headers: dict[str, str], kind: str = "application/json"
) -> None:
    head = [(b"content-type", kind.encode()), (b"content-length", str(len(body)).encode())]
    if kind == "text/event-stream":
        head.append((b"cache-control", b"no-cache"))
    head.extend((k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items())
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)
