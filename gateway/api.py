"""The OpenAI-compatible HTTP endpoints."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import asdict
from typing import Any, TypeVar

import structlog
from litestar import Request, Response, get, post
from litestar.params import FromPath
from litestar.response import Stream
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel, ValidationError

from backends.base import DeploymentSettings
from gateway.dispatch import Gateway, OpenedStream, cost_usd
from gateway.errors import (
    GatewayError,
    InvalidRequestError,
    NotFoundError,
    ServiceUnavailableError,
)
from gateway.protocol import (
    ChatCompletionChunk,
    ChatCompletionRequest,
    Completion,
    CompletionRequest,
    Usage,
)
from gateway.sse import DONE, error_frame, frame
from gateway.telemetry import Telemetry

M = TypeVar("M", bound=BaseModel)
Chunk = ChatCompletionChunk | Completion
log = structlog.get_logger("switchyard.api")
JSON = "application/json"


def _gateway(request: Request[Any, Any, Any]) -> Gateway:
    gateway: Gateway = request.app.state.gateway
    return gateway


def _serving_gateway(request: Request[Any, Any, Any]) -> Gateway:
    """The gateway, if it takes new work: while draining, new requests go elsewhere."""
    gateway = _gateway(request)
    if gateway.draining:
        raise ServiceUnavailableError(
            "This gateway is shutting down; retry on another replica.",
            code="shutting_down",
            retry_after=1.0,
        )
    return gateway


def _facts(request: Request[Any, Any, Any]) -> dict[str, Any]:
    facts: dict[str, Any] = request.scope.setdefault("state", {}).setdefault("log", {})
    return facts


def parse_body(model: type[M], body: bytes) -> M:
    """Validate a request body; errors become 400s naming the offending ``param``."""
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        if first["type"] == "json_invalid":
            raise InvalidRequestError(
                "We could not parse the JSON body of your request: "
                f"{first['msg']}. Send valid JSON with Content-Type application/json."
            ) from exc
        loc = [str(p) for p in first["loc"]]
        param = ".".join(loc) or None
        if first["type"] == "model_type":
            raise InvalidRequestError("The request body must be a JSON object.") from exc
        raise InvalidRequestError(
            f"Invalid value for '{param}': {first['msg']}", param=param
        ) from exc


def _json(model: BaseModel, headers: dict[str, str]) -> Response[bytes]:
    return Response(model.model_dump_json().encode(), media_type=JSON, headers=headers)


@post("/v1/chat/completions", status_code=200)
async def chat_completions(request: Request[Any, Any, Any]) -> Response[Any]:
    body = parse_body(ChatCompletionRequest, await request.body())
    facts = _facts(request)
    facts.update(model=body.model, stream=bool(body.stream))
    gateway = _serving_gateway(request)
    if body.stream:
        started = time.perf_counter()
        opened = await gateway.open_stream(body.model, lambda b: b.chat_stream(body))
        facts.update(deployment=opened.backend.name, ttft_ms=_ms_since(started))
        sse = _sse(opened, body.include_usage(), facts)
        return Stream(sse, media_type="text/event-stream", headers=_route_headers(opened))
    chosen, result = await gateway.call(body.model, lambda b: b.chat(body))
    facts.update(deployment=chosen.settings.name, **_usage_facts(chosen.settings, result.usage))
    return _json(result, {"x-switchyard-deployment": chosen.settings.name})


@post("/v1/completions", status_code=200)
async def completions(request: Request[Any, Any, Any]) -> Response[Any]:
    body = parse_body(CompletionRequest, await request.body())
    facts = _facts(request)
    facts.update(model=body.model, stream=bool(body.stream))
    gateway = _serving_gateway(request)
    if body.stream:
        started = time.perf_counter()
        opened = await gateway.open_stream(
            body.model, lambda b: b.completion_stream(body), "text_completion"
        )
        facts.update(deployment=opened.backend.name, ttft_ms=_ms_since(started))
        sse = _sse(opened, body.include_usage(), facts)
        return Stream(sse, media_type="text/event-stream", headers=_route_headers(opened))
    chosen, result = await gateway.call(body.model, lambda b: b.completion(body), "text_completion")
    facts.update(deployment=chosen.settings.name, **_usage_facts(chosen.settings, result.usage))
    return _json(result, {"x-switchyard-deployment": chosen.settings.name})


async def _sse(
    opened: OpenedStream[Any], include_usage: bool, facts: dict[str, Any]
) -> AsyncIterator[bytes]:
    """Frame chunks as SSE. The backend's closing usage chunk is sent only when asked for;
    a failure after the first byte becomes an in-band error frame, then ``[DONE]``."""
    chunk: Chunk = opened.first
    try:
        while True:
            if chunk.usage is not None and not chunk.choices:
                facts.update(_usage_facts(opened.candidate.settings, chunk.usage))
                if include_usage:
                    yield frame(chunk)
            else:
                yield frame(chunk)
            chunk = await anext(opened.rest)
    except StopAsyncIteration:
        pass
    except GatewayError as exc:
        facts.update(stream_error=exc.message)
        yield error_frame(exc)
    except Exception as exc:
        log.exception("stream_failed", deployment=opened.backend.name)
        facts.update(stream_error=str(exc))
        yield error_frame(GatewayError("The stream failed on the server; it is incomplete."))
    finally:
        await _aclose(opened.rest)
    yield DONE


async def _aclose(iterator: AsyncIterator[Any]) -> None:
    close = getattr(iterator, "aclose", None)
    if close is not None:
        await close()


def _route_headers(opened: OpenedStream[Any]) -> dict[str, str]:
    return {"x-switchyard-deployment": opened.backend.name, "cache-control": "no-cache"}


def _usage_facts(deployment: DeploymentSettings, usage: Usage | None) -> dict[str, Any]:
    if usage is None:
        return {}
    cost = cost_usd(deployment.price, usage.prompt_tokens, usage.completion_tokens)
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "cost_usd": round(cost, 8),
    }


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)


@get("/v1/models")
async def list_models(request: Request[Any, Any, Any]) -> Response[bytes]:
    return _json(_gateway(request).model_list(), {})


@get("/v1/models/{model_id:path}")
async def retrieve_model(
    request: Request[Any, Any, Any], model_id: FromPath[str]
) -> Response[bytes]:
    model_id = model_id.lstrip("/")
    for model in _gateway(request).model_list().data:
        if model.id == model_id:
            return _json(model, {})
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


@get("/metrics")
async def metrics(request: Request[Any, Any, Any]) -> Response[bytes]:
    telemetry: Telemetry = request.app.state.telemetry
    return Response(telemetry.exposition(), media_type=CONTENT_TYPE_LATEST)


ROUTES = [metrics, chat_completions, completions, list_models, retrieve_model, liveness, readiness]
