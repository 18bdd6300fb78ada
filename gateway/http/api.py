"""The OpenAI-compatible HTTP endpoints."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from litestar import Request, Response, asgi, get, post
from litestar.params import FromPath
from litestar.types import ASGIApp, Receive, Scope, Send
from prometheus_client import CONTENT_TYPE_LATEST

from backends.base import Backend, EmbeddingsBackend, cost_usd
from gateway.dispatch.router import Gateway
from gateway.dispatch.routing import describe_request
from gateway.errors import (
    InvalidRequestError,
    NotFoundError,
)
from gateway.http.serving import (
    CHAT,
    COMPLETION,
    handle,
    json_response,
    parse_body,
    request_facts,
    taking_work,
)
from gateway.protocol import (
    EmbeddingRequest,
    EmbeddingResponse,
)
from gateway.telemetry.instruments import Telemetry


def _gateway(request: Request[Any, Any, Any]) -> Gateway:
    gateway: Gateway = request.app.state.gateway
    return gateway


@asgi("/v1/chat/completions", copy_scope=False)
async def chat_completions(scope: Scope, receive: Receive, send: Send) -> None:
    await handle(scope, receive, send, CHAT)


@asgi("/v1/completions", copy_scope=False)
async def completions(scope: Scope, receive: Receive, send: Send) -> None:
    await handle(scope, receive, send, COMPLETION)


@post("/v1/embeddings", status_code=200)
async def embeddings(request: Request[Any, Any, Any]) -> ASGIApp:
    body = parse_body(EmbeddingRequest, await request.body())
    facts = request_facts(request.scope)
    facts.update(model=body.model)
    gateway = taking_work(_gateway(request))

    async def embed(backend: Backend) -> EmbeddingResponse:
        if not isinstance(backend, EmbeddingsBackend) or not backend.capabilities.embeddings:
            raise InvalidRequestError(
                f"The model '{body.model}' does not serve embeddings.", param="model"
            )
        return await backend.embeddings(body)

    routed = await gateway.call(body.model, embed, "embeddings", request=describe_request(body))
    chosen, result = routed.candidate, routed.value
    tokens = result.usage.prompt_tokens
    cost = cost_usd(chosen.settings.price, tokens, 0)
    facts.update(deployment=chosen.settings.name, prompt_tokens=tokens, cost_usd=cost)
    headers = {"x-shunter-deployment": chosen.settings.name, "x-shunter-route": routed.reason}
    return json_response(result, headers)


@get("/v1/models")
async def list_models(request: Request[Any, Any, Any]) -> ASGIApp:
    return json_response(_gateway(request).model_list(), {})


@get("/v1/models/{model_id:path}")
async def retrieve_model(request: Request[Any, Any, Any], model_id: FromPath[str]) -> ASGIApp:
    model_id = model_id.lstrip("/")
    for model in _gateway(request).model_list().data:
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
    ready = gateway.ready and not gateway.draining
    status = "shutting_down" if gateway.draining else "ready" if ready else "starting"
    deployments = {name: asdict(b.stats()) for name, b in sorted(gateway.backends.items())}
    body = {"status": status, "config_version": gateway.config_version, "deployments": deployments}
    return Response(body, status_code=200 if ready else 503)


@get("/v1/worker/stats")
async def worker_stats(request: Request[Any, Any, Any]) -> Response[dict[str, Any]]:
    """Live figures per deployment (sequences, KV cells, queue, rates, prefix hits), for routing."""
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
    embeddings,
    list_models,
    retrieve_model,
    liveness,
    readiness,
    worker_stats,
]
