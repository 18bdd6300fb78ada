"""``create_app(settings)``: the Litestar application around a :class:`Gateway`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from litestar import Litestar, Request, Response
from litestar.exceptions import HTTPException
from litestar.middleware import DefineMiddleware

from gateway.admission.admit import Admission
from gateway.admission.cache import ResponseCache
from gateway.admission.limits import RateLimit
from gateway.config import CacheRule, GatewayConfig
from gateway.dispatch import Gateway, ReplicaSync
from gateway.errors import GatewayError
from gateway.hosted.context import HostedContext
from gateway.http.bodies import BodyBuffers
from gateway.http.cors import cors_config, trusted_origins
from gateway.http.guard import RequestGuard
from gateway.http.intake import Services
from gateway.http.mcpsession import McpSessions
from gateway.http.messages import anthropic_error
from gateway.http.middleware import RequestContextMiddleware, add_request_id
from gateway.http.reload import ConfigWatcher
from gateway.http.routes import ROUTES
from gateway.http.ui import UI_ROUTES, StatusPage
from gateway.ingress.conversations import ConversationStore
from gateway.ingress.response_tools import HostedTools
from gateway.ingress.store import ResponseStore
from gateway.mcp.accounting import ToolAccounting
from gateway.mcp.servers import HubSlot
from gateway.protocol.messages import error_message
from gateway.state import StateSettings, open_store
from gateway.state.base import StateStore
from gateway.telemetry.instruments import Telemetry

log = structlog.get_logger("shunter.app")

_HTTP_TYPES = {401: "invalid_request_error", 403: "permission_error", 404: "invalid_request_error"}


@dataclass(frozen=True)
class AppSettings:
    """Everything the app needs; built by the CLI or by tests."""

    config: GatewayConfig
    config_path: Path | None = None
    watch_config: bool = True
    state: StateSettings = field(default_factory=StateSettings)
    label: str = "<embedded default>"
    """What serves, for the ready line when there is no config file (a worker's model)."""


def create_app(
    settings: AppSettings, gateway: Gateway | None = None, telemetry: Telemetry | None = None
) -> Litestar:
    """Build the app. Backends start in the lifespan and stop (releasing memory) at exit."""
    gw = gateway or Gateway.from_config(settings.config)
    tel = telemetry or Telemetry()
    gw.tracer = tel.tracer
    tel.watch(lambda: gw.backends, lambda: gw.breakers)
    tel.configure(frozenset(settings.config.models))  # the model label's values
    tools = ToolAccounting(tel.registry, lambda: tel.tracer)

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        tel.start_tracing()  # an OTEL_* setting it cannot honour stops the start here
        store = open_store(settings.state)
        services = _services(store, settings.config)
        gw.on_reload.append(lambda config: _reconfigure(services, config))
        gw.on_reload.append(lambda config: tel.configure(frozenset(config.models)))
        app.state.gateway, app.state.telemetry, app.state.services = gw, tel, services
        app.state.status_page = StatusPage()  # its uptime counts from here
        mcp = app.state.mcp = HubSlot(settings.config.mcp, tools)
        app.state.mcp_sessions = McpSessions(store, _session_secret(settings.config, services))
        gw.on_reload.append(lambda config: mcp.apply(config.mcp))
        services.hosted = HostedContext.of(settings.config, mcp.hub)
        gw.on_reload.append(lambda config: _rehost(services, config, mcp))
        await gw.start()
        watcher = None
        if settings.config_path is not None and settings.watch_config:
            watcher = ConfigWatcher(settings.config_path, gw)
            watcher.start()
        sync = ReplicaSync(store, gw) if settings.state.redis_url else None
        if sync is not None:
            await sync.start()
        await _say_ready(settings, gw, services)
        mcp.start()  # in the background: a server still starting fails only its own calls
        try:
            yield
        finally:
            if watcher is not None:
                await watcher.stop()
            if sync is not None:
                await sync.stop()
            await gw.aclose()
            await mcp.aclose()
            await store.aclose()
            tel.shutdown()

    return _litestar(settings, tel, lifespan)


def _litestar(
    settings: AppSettings,
    telemetry: Telemetry,
    lifespan: Callable[[Litestar], AbstractAsyncContextManager[None]],
) -> Litestar:
    return Litestar(
        route_handlers=[*ROUTES, *UI_ROUTES],
        lifespan=[lifespan],
        # the guard first: a request it refuses is never parsed
        middleware=[
            DefineMiddleware(RequestGuard, trusted_origins=trusted_origins(settings.config.cors)),
            DefineMiddleware(RequestContextMiddleware, telemetry=telemetry),
        ],
        before_send=[add_request_id],
        exception_handlers={
            GatewayError: _gateway_error,
            HTTPException: _http_error,
            Exception: _unexpected_error,
        },
        openapi_config=None,
        cors_config=cors_config(settings.config.cors),
        logging_config=None,
    )


async def _say_ready(settings: AppSettings, gateway: Gateway, services: Services) -> None:
    """The ``gateway_ready`` log line: what serves, from where, and how keys are checked."""
    # decided here, once: a gateway that starts with keys never runs open afterwards
    open_mode = not await services.admission.keys.auth_enabled()
    if settings.config.http.protect_ops and not services.admission.keys.has_master:
        log.warning("protect_ops_without_master_key", effect="/metrics always answers 401")
    log.info(
        "gateway_ready",
        models=sorted(settings.config.models),
        deployments=sorted(gateway.backends),
        config=str(settings.config_path or settings.label),
        state="redis" if settings.state.redis_url else "memory",
        auth="open (no API keys configured)" if open_mode else "api keys",
    )


def _services(store: StateStore, config: GatewayConfig) -> Services:
    return Services(
        admission=Admission.build(store, config, deployment_limits=_deployment_limits(config)),
        cache=ResponseCache(store, _cache_rules(config)),
        responses=ResponseStore(store, config.responses.ttl_s, int(config.responses.max_bytes)),
        conversations=ConversationStore(store),
        send_timeout_s=config.http.send_timeout_s,
        protect_ops=config.http.protect_ops,
        hosted_tools=config.responses.hosted_tools,
        hosted_by_model=_hosted_by_model(config),
        bodies=BodyBuffers(
            _mb(config.http.body_buffers_mb), _mb(config.http.body_buffers_per_key_mb)
        ),
    )


def _mb(megabytes: float) -> int:
    return int(megabytes * 1_000_000)


def _hosted_by_model(config: GatewayConfig) -> dict[str, HostedTools]:
    return {
        name: route.hosted_tools
        for name, route in config.models.items()
        if route.hosted_tools is not None
    }


def _reconfigure(services: Services, config: GatewayConfig) -> None:
    services.admission.apply(config, _deployment_limits(config))
    services.cache.rules = _cache_rules(config)
    services.responses.ttl_s = config.responses.ttl_s
    services.responses.max_bytes = int(config.responses.max_bytes)
    services.bodies.total = _mb(config.http.body_buffers_mb)
    services.bodies.per_key = _mb(config.http.body_buffers_per_key_mb)
    services.hosted_tools = config.responses.hosted_tools
    services.hosted_by_model = _hosted_by_model(config)
    services.send_timeout_s = config.http.send_timeout_s
    services.protect_ops = config.http.protect_ops


def _session_secret(config: GatewayConfig, services: Services) -> bytes | None:
    """What signs ``/mcp`` session ids: the config's secret, else one derived from the
    master key (``None``: one kept in the state store)."""
    if config.mcp.session_secret is not None:
        return config.mcp.session_secret.get_secret_value().encode()
    return services.admission.keys.derived_secret("mcp-session")


def _rehost(services: Services, config: GatewayConfig, mcp: HubSlot) -> None:
    """The hosted tools of a reloaded config, on its (possibly new) hub."""
    services.hosted = HostedContext.of(config, mcp.hub)


def _deployment_limits(config: GatewayConfig) -> dict[str, RateLimit]:
    return {d.name: RateLimit(rpm=d.rpm, tpm=d.tpm) for d in config.deployments}


def _cache_rules(config: GatewayConfig) -> dict[str, CacheRule]:
    return {name: route.cache for name, route in config.models.items() if route.cache}


def _gateway_error(request: Request[Any, Any, Any], exc: GatewayError) -> Response[dict[str, Any]]:
    if _anthropic(request):
        return _anthropic_error(request, exc.status_code, error_message(exc), exc.headers())
    return Response(exc.to_body(), status_code=exc.status_code, headers=exc.headers())


def _anthropic(request: Request[Any, Any, Any]) -> bool:
    """Errors of the Messages routes take Anthropic's shape, for Anthropic's clients."""
    path: str = request.scope["path"]
    return path.startswith("/v1/messages")


def _anthropic_error(
    request: Request[Any, Any, Any], status: int, message: str, headers: dict[str, str] | None
) -> Response[dict[str, Any]]:
    request_id = request.scope.get("state", {}).get("request_id")
    status, body = anthropic_error(status, message, request_id)
    return Response(body, status_code=status, headers=headers or None)


def _http_error(request: Request[Any, Any, Any], exc: HTTPException) -> Response[dict[str, Any]]:
    status = exc.status_code
    if _anthropic(request):
        return _anthropic_error(request, status, exc.detail, exc.headers)
    body = {
        "error": {
            "message": exc.detail,
            "type": _HTTP_TYPES.get(
                status, "invalid_request_error" if status < 500 else "server_error"
            ),
            "param": None,
            "code": None,
        }
    }
    return Response(body, status_code=status, headers=exc.headers or None)


def _unexpected_error(request: Request[Any, Any, Any], exc: Exception) -> Response[dict[str, Any]]:
    log.exception("unhandled_error", error_type=type(exc).__name__)
    error = GatewayError("The server had an error while processing your request.")
    if _anthropic(request):
        return _anthropic_error(request, 500, error.message, None)
    return Response(error.to_body(), status_code=500)
