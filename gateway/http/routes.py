"""The HTTP routes: OpenAI's (chat, completions, Responses, embeddings, models),
Anthropic's Messages, health and metrics. The generation APIs' routes live beside their
endpoints (:mod:`~gateway.http.chat`, :mod:`~gateway.http.completions`,
:mod:`~gateway.http.responses`, :mod:`~gateway.http.messages`,
:mod:`~gateway.http.embeddings`); the rest are here.

Every ``/v1`` route answers only to a valid key when keys are configured: generation and
embeddings through admission (:mod:`gateway.http.serving`); the model list shows the
models the key may use; worker stats need any valid key. ``/health/liveness`` is public;
``/metrics`` and readiness's figures need the master key when ``http.protect_ops`` is on
(:mod:`gateway.http.middleware`).
"""

from __future__ import annotations

import os
from dataclasses import fields
from typing import Any

from litestar import Request, Response, get, route
from litestar.handlers import BaseRouteHandler, HTTPRouteHandler
from litestar.params import FromPath
from litestar.types import ASGIApp
from prometheus_client import CONTENT_TYPE_LATEST

from backends.base import LiveStats
from gateway.admission.keys import KeyInfo, may_use
from gateway.dispatch import Gateway
from gateway.errors import NotFoundError
from gateway.http.chat import chat_completions
from gateway.http.completions import completions
from gateway.http.conversations import CONVERSATION_ROUTES
from gateway.http.embeddings import embeddings
from gateway.http.intake import Services, json_response
from gateway.http.mcproute import mcp_endpoint
from gateway.http.messages import MESSAGE_ROUTES
from gateway.http.responses import RESPONSE_ROUTES
from gateway.http.responses_compact import compact_response
from gateway.protocol import ModelList
from gateway.telemetry.instruments import Telemetry


def _gateway(request: Request[Any, Any, Any]) -> Gateway:
    gateway: Gateway = request.app.state.gateway
    return gateway


async def _caller(request: Request[Any, Any, Any]) -> KeyInfo:
    """The caller's key (401/403 without a valid one when keys are configured)."""
    services: Services = request.app.state.services
    return await services.admission.authenticate(request.headers.get("authorization"))


async def _visible_models(request: Request[Any, Any, Any]) -> ModelList:
    key = await _caller(request)
    models = _gateway(request).model_list()
    if key.models is None:
        return models
    return ModelList(data=[m for m in models.data if may_use(key, m.id)])


@get("/v1/models")
async def list_models(request: Request[Any, Any, Any]) -> ASGIApp:
    return json_response(await _visible_models(request), {})


@get("/v1/models/{model_id:path}")
async def retrieve_model(request: Request[Any, Any, Any], model_id: FromPath[str]) -> ASGIApp:
    model_id = model_id.lstrip("/")
    for model in (await _visible_models(request)).data:
        if model.id == model_id:
            return json_response(model, {})
    raise NotFoundError(
        f"The model '{model_id}' does not exist or you do not have access to it.",
        param="model",
        code="model_not_found",
    )


@get("/health/liveness")
async def liveness() -> dict[str, str]:
    return {"status": "ok"}


@get("/health/readiness")
async def readiness(request: Request[Any, Any, Any]) -> Response[dict[str, Any]]:
    gateway = _gateway(request)
    deployments = {
        name: {**_figures(b.stats(), links=False), **gateway.deployment_health(name)}
        for name, b in sorted(gateway.backends.items())
    }
    stalled = any(d.get("stalled") for d in deployments.values())  # a local engine is stuck
    ready = gateway.ready and not gateway.draining and not stalled
    status = (
        "shutting_down" if gateway.draining
        else "starting" if not gateway.ready
        else "stalled" if stalled
        else "ready"
    )  # fmt: skip
    body = {
        "status": status,
        "config_version": gateway.config_version,
        "pid": os.getpid(),  # with serve --workers N: which worker answered
        "deployments": deployments,
    }
    return Response(body, status_code=200 if ready else 503)


@get("/v1/worker/stats")
async def worker_stats(request: Request[Any, Any, Any]) -> Response[dict[str, Any]]:
    """Live figures per deployment (sequences, KV cells, queue, rates, prefix hits), for routing."""
    await _caller(request)
    backends = _gateway(request).backends
    deployments = {name: _figures(b.stats(), links=True) for name, b in sorted(backends.items())}
    return Response({"object": "worker.stats", "deployments": deployments})


def _figures(stats: LiveStats, *, links: bool) -> dict[str, Any]:
    """A backend's live figures as JSON; the prefix links it holds in full for a gateway
    that routes on them (``links``), else counted."""
    figures = {f.name: getattr(stats, f.name) for f in fields(stats)}
    held = stats.held_prefixes
    figures["held_prefixes"] = dict(held) if links else len(held)
    return figures


@get("/metrics")
async def metrics(request: Request[Any, Any, Any]) -> Response[bytes]:
    telemetry: Telemetry = request.app.state.telemetry
    return Response(telemetry.exposition(), media_type=CONTENT_TYPE_LATEST)


def options_handlers(handlers: list[BaseRouteHandler]) -> list[HTTPRouteHandler]:
    """One ``OPTIONS`` handler per path that several handlers share, naming all their methods.

    Litestar makes the ``OPTIONS`` answer of a path from the first handler registered on it,
    so a path served by a ``GET`` and a ``DELETE`` handler would list ``GET`` alone.
    """
    methods: dict[str, set[str]] = {}
    shared: set[str] = set()
    for handler in handlers:
        if not isinstance(handler, HTTPRouteHandler):
            continue
        for path in handler.paths:
            if path in methods:
                shared.add(path)
            methods.setdefault(path, {"OPTIONS"}).update(handler.http_methods)
    return [_options(path, ", ".join(sorted(methods[path]))) for path in sorted(shared)]


def _options(path: str, allow: str) -> HTTPRouteHandler:
    async def options(request: Request[Any, Any, Any]) -> Response[None]:
        return Response(None, status_code=204, headers={"allow": allow})

    return route(path, http_method="OPTIONS", include_in_schema=False, name=f"options:{path}")(
        options
    )


_HANDLERS: list[BaseRouteHandler] = [
    metrics,
    chat_completions,
    completions,
    *RESPONSE_ROUTES,
    compact_response,
    *CONVERSATION_ROUTES,
    *MESSAGE_ROUTES,
    embeddings,
    list_models,
    retrieve_model,
    liveness,
    readiness,
    worker_stats,
    mcp_endpoint,
]
# first, so that Litestar makes no OPTIONS handler of its own on these paths
ROUTES = [*options_handlers(_HANDLERS), *_HANDLERS]
