"""The HTTP endpoints: OpenAI's (chat, completions, Responses, embeddings, models) and
Anthropic's Messages.

Every ``/v1`` route answers only to a valid key when keys are configured: generation and
embeddings through admission (:mod:`gateway.http.serving`); the model list shows the
models the key may use; worker stats need any valid key. ``/health/liveness`` is public;
``/metrics`` and readiness's figures need the master key when ``http.protect_ops`` is on
(:mod:`gateway.http.middleware`).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from typing import Any

from litestar import Request, Response, asgi, delete, get
from litestar.params import FromPath
from litestar.types import ASGIApp, Receive, Scope, Send
from prometheus_client import CONTENT_TYPE_LATEST

from gateway.admission.keys import KeyInfo, may_use
from gateway.dispatch.router import Gateway
from gateway.errors import NotFoundError
from gateway.http.apis import MESSAGES, RESPONSES, count_tokens, input_item_list, stored
from gateway.http.asgi import JSONBody
from gateway.http.serving import (
    CHAT,
    COMPLETION,
    Services,
    handle,
    handle_embeddings,
    json_response,
)
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


@asgi("/v1/chat/completions", copy_scope=False)
async def chat_completions(scope: Scope, receive: Receive, send: Send) -> None:
    await handle(scope, receive, send, CHAT)


@asgi("/v1/completions", copy_scope=False)
async def completions(scope: Scope, receive: Receive, send: Send) -> None:
    await handle(scope, receive, send, COMPLETION)


@asgi("/v1/responses", copy_scope=False)
async def responses(scope: Scope, receive: Receive, send: Send) -> None:
    await handle(scope, receive, send, RESPONSES)


@asgi("/v1/messages", copy_scope=False)
async def messages(scope: Scope, receive: Receive, send: Send) -> None:
    await handle(scope, receive, send, MESSAGES)


@asgi("/v1/messages/count_tokens", copy_scope=False)
async def messages_count_tokens(scope: Scope, receive: Receive, send: Send) -> None:
    await count_tokens(scope, receive, send)


def _services(request: Request[Any, Any, Any]) -> Services:
    services: Services = request.app.state.services
    return services


@get("/v1/responses/{response_id:str}")
async def retrieve_response(request: Request[Any, Any, Any], response_id: FromPath[str]) -> ASGIApp:
    """A stored response, for the key that created it (404 for any other)."""
    auth = request.headers.get("authorization")
    record = await stored(_services(request), auth, response_id)
    return JSONBody(json.dumps(record["response"]).encode(), {})


@get("/v1/responses/{response_id:str}/input_items")
async def response_input_items(
    request: Request[Any, Any, Any], response_id: FromPath[str]
) -> ASGIApp:
    """The input items of a stored response, in order (one page)."""
    auth = request.headers.get("authorization")
    record = await stored(_services(request), auth, response_id)
    return json_response(input_item_list(record, response_id), {})


@delete("/v1/responses/{response_id:str}", status_code=200)
async def delete_response(request: Request[Any, Any, Any], response_id: FromPath[str]) -> ASGIApp:
    """Delete a stored response (the key that created it only)."""
    services = _services(request)
    key = await services.admission.authenticate(request.headers.get("authorization"))
    await services.responses.delete(response_id, key.id)
    body = {"id": response_id, "object": "response.deleted", "deleted": True}
    return JSONBody(json.dumps(body).encode(), {})


@asgi("/v1/embeddings", copy_scope=False)
async def embeddings(scope: Scope, receive: Receive, send: Send) -> None:
    await handle_embeddings(scope, receive, send)


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
        name: {**asdict(b.stats()), **gateway.deployment_health(name)}
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
    deployments = {name: asdict(b.stats()) for name, b in sorted(backends.items())}
    return Response({"object": "worker.stats", "deployments": deployments})


@get("/metrics")
async def metrics(request: Request[Any, Any, Any]) -> Response[bytes]:
    telemetry: Telemetry = request.app.state.telemetry
    return Response(telemetry.exposition(), media_type=CONTENT_TYPE_LATEST)


ROUTES = [
    metrics,
    chat_completions,
    completions,
    responses,
    retrieve_response,
    response_input_items,
    delete_response,
    messages,
    messages_count_tokens,
    embeddings,
    list_models,
    retrieve_model,
    liveness,
    readiness,
    worker_stats,
]
