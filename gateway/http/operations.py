"""The registry's operations as routes: one bare ASGI route per path, whatever API and
transport, each request served by the same edge (:func:`serve`).

A route's ``opt`` names its API and its operation per method, so that the access line,
the guard and the error handlers read them from the registry too."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import structlog
from litestar import Request, asgi, route
from litestar.enums import HttpMethod, ScopeType
from litestar.exceptions import MethodNotAllowedException
from litestar.handlers import BaseRouteHandler
from litestar.types import ASGIApp, Receive, Scope, Send

from gateway.apis.contract import Api, Operation, custom_method
from gateway.errors import ModelNotFoundError, NotFoundError
from gateway.http.asgi import JSONBody
from gateway.http.intake import arrive
from gateway.http.serving import as_asgi, generate
from gateway.http.socket import refuse_socket, serve_socket
from gateway.http.unknown import list_served

log = structlog.get_logger("shunter.api")
_PARAMETER = re.compile(r"\{(\w+)(?::\w+)?\}")


def routes(apis: Sequence[Api]) -> list[BaseRouteHandler]:
    """One route per path of the operations of ``apis`` (two APIs may share a path with
    different methods or custom methods: Gemini's ``/v1/models/{model}:generateContent``
    beside OpenAI's ``GET /v1/models/{model}``)."""
    by_path: dict[str, dict[str, Actions]] = {}
    for api in apis:
        for operation in api.operations:
            held = by_path.setdefault(operation.path, {})
            for method in operation.methods:
                held.setdefault(method, {})[operation.action] = (api, operation)
    return [_route(path, methods) for path, methods in by_path.items()]


Actions = dict[str | None, tuple[Api, Operation]]
"""A path's operations for one method, with their API, by custom method (``None``: the
path itself)."""


def _route(path: str, methods: dict[str, Actions]) -> BaseRouteHandler:
    allow = ", ".join(sorted({*methods, "OPTIONS"}))
    served = [held for ops in methods.values() for held in ops.values()]
    socket = next(((api, op) for api, op in served if op.socket is not None), None)
    parameter = _last_parameter(path)

    async def serve_path(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == ScopeType.WEBSOCKET:
            if socket is None:
                await refuse_socket(scope, receive, send, f"{path} takes no WebSocket.")
                return
            await serve_socket(scope, receive, send, *socket)
            return
        method = str(scope.get("method"))
        actions = methods.get(method)
        if actions is None:
            if method == "OPTIONS":
                await JSONBody(b"", {"allow": allow}, 204)(scope, receive, send)
                return
            raise MethodNotAllowedException(headers={"allow": allow})
        api, operation = _chosen(scope, actions, parameter)
        await serve(scope, receive, send, api, operation)

    operations = {method: _names(ops) for method, ops in methods.items()}
    json = [
        m
        for m, ops in methods.items()
        if m in ("POST", "PUT", "PATCH") and any(op.json_body for _, op in ops.values())
    ]
    opt: dict[str, Any] = {
        "api": _api_names(methods),
        "operations": operations,
        "json": json,
        "parameter": parameter,
    }
    name = f"{served[0][0].name}:{path}"
    if "{" not in path:
        return asgi(path, copy_scope=False, opt=opt, name=name)(serve_path)

    # the framework resolves a bare ASGI route's path parameters only without a method:
    # a path with parameters is an HTTP route whose answer is the same ASGI app
    async def with_parameters(request: Request[Any, Any, Any]) -> ASGIApp:
        return serve_path

    verbs = [HttpMethod(method) for method in sorted({*methods, "OPTIONS"})]
    return route(path, http_method=verbs, opt=opt, name=name, status_code=200)(with_parameters)


def _names(actions: Actions) -> str | dict[str | None, str]:
    """The operation's name, or each custom method's (read by :func:`operation_of`)."""
    if len(actions) == 1 and None in actions:
        return actions[None][1].name
    return {action: op.name for action, (_, op) in actions.items()}


def _api_names(methods: dict[str, Actions]) -> str | dict[str, str]:
    """The API whose shape a refusal on this path takes: one for the path, or one per
    method where APIs share it (by the path's own operation where a method has several)."""
    by_method = {}
    for method, actions in methods.items():
        api, _ = actions.get(None) or next(iter(actions.values()))
        by_method[method] = api.name
    names = set(by_method.values())
    return names.pop() if len(names) == 1 else by_method


def _last_parameter(path: str) -> str | None:
    found = _PARAMETER.findall(path)
    return found[-1] if found else None


def _chosen(scope: Scope, actions: Actions, parameter: str | None) -> tuple[Api, Operation]:
    """The operation of ``actions`` the request names: by the custom method its last path
    parameter ends in (``x:generateContent``), which the parameter then goes without."""
    if len(actions) == 1 and None in actions:
        return actions[None]
    params: dict[str, Any] = dict(scope.get("path_params") or {})
    head, action = custom_method(str(params.get(parameter or "", "")))
    operation = actions.get(action) if action is not None else None
    if operation is None:
        operation = actions.get(None)
        if operation is None:
            raise NotFoundError(f"{scope.get('path')} names no method this path serves.")
        return operation
    params[parameter or ""] = head
    scope["path_params"] = params
    return operation


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
