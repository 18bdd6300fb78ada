"""The registry's operations as routes: one bare ASGI route per path, whatever API and
transport, each request served by the same edge (:func:`serve`).

A route's ``opt`` names its API and its operation per method, so that the access line,
the guard and the error handlers read them from the registry too."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import structlog
from litestar import Request, asgi, route
from litestar.enums import HttpMethod, ScopeType
from litestar.exceptions import MethodNotAllowedException
from litestar.handlers import BaseRouteHandler
from litestar.types import ASGIApp, Receive, Scope, Send

from gateway.apis.contract import Api, Operation
from gateway.errors import ModelNotFoundError
from gateway.http.asgi import JSONBody
from gateway.http.intake import arrive
from gateway.http.serving import as_asgi, generate
from gateway.http.socket import refuse_socket, serve_socket
from gateway.http.unknown import list_served

log = structlog.get_logger("shunter.api")


def routes(apis: Sequence[Api]) -> list[BaseRouteHandler]:
    """One route per path of the operations of ``apis``."""
    by_path: dict[str, tuple[Api, dict[str, Operation]]] = {}
    for api in apis:
        for operation in api.operations:
            held = by_path.setdefault(operation.path, (api, {}))
            for method in operation.methods:
                held[1][method] = operation
    return [_route(path, api, methods) for path, (api, methods) in by_path.items()]


def _route(path: str, api: Api, methods: dict[str, Operation]) -> BaseRouteHandler:
    allow = ", ".join(sorted({*methods, "OPTIONS"}))
    socket = next((op for op in methods.values() if op.socket is not None), None)

    async def serve_path(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == ScopeType.WEBSOCKET:
            if socket is None:
                await refuse_socket(scope, receive, send, f"{path} takes no WebSocket.")
                return
            await serve_socket(scope, receive, send, api, socket)
            return
        method = str(scope.get("method"))
        operation = methods.get(method)
        if operation is None:
            if method == "OPTIONS":
                await JSONBody(b"", {"allow": allow}, 204)(scope, receive, send)
                return
            raise MethodNotAllowedException(headers={"allow": allow})
        await serve(scope, receive, send, api, operation)

    operations = {method: op.name for method, op in methods.items()}
    json = [m for m, op in methods.items() if op.json_body and m in ("POST", "PUT", "PATCH")]
    opt: dict[str, Any] = {"api": api.name, "operations": operations, "json": json}
    name = f"{api.name}:{path}"
    if "{" not in path:
        return asgi(path, copy_scope=False, opt=opt, name=name)(serve_path)

    # the framework resolves a bare ASGI route's path parameters only without a method:
    # a path with parameters is an HTTP route whose answer is the same ASGI app
    async def with_parameters(request: Request[Any, Any, Any]) -> ASGIApp:
        return serve_path

    verbs = [HttpMethod(method) for method in sorted({*methods, "OPTIONS"})]
    return route(path, http_method=verbs, opt=opt, name=name, status_code=200)(with_parameters)


async def serve(scope: Scope, receive: Receive, send: Send, api: Api, operation: Operation) -> None:
    """One HTTP request of ``operation``: the edge (key, limits, body), then the operation."""
    exchange = await arrive(scope, receive, api, operation)
    try:
        if operation.codec is not None:
            await generate(scope, receive, send, exchange, operation.codec)
            return
        assert operation.handler is not None, "an operation has a codec or a handler"
        reply = await operation.handler(exchange)
    except ModelNotFoundError as exc:
        list_served(exc, exchange.key)
        raise
    await as_asgi(reply)(scope, receive, send)
