"""``create_app(settings)``: the Litestar application around a :class:`Gateway`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from litestar import Litestar, Request, Response
from litestar.events import BaseEventEmitterBackend
from litestar.exceptions import HTTPException, ImproperlyConfiguredException
from litestar.middleware import DefineMiddleware
from litestar.plugins import PluginProtocol
from litestar.plugins.core import MsgspecDIPlugin

from gateway.admission.admit import Admission
from gateway.admission.cache import ResponseCache
from gateway.admission.limits import RateLimit
from gateway.apis.contract import Api, Services, openai_error
from gateway.apis.registry import api_of_path, apis
from gateway.config import CacheRule, GatewayConfig
from gateway.dispatch import Gateway, ReplicaSync
from gateway.errors import GatewayError
from gateway.hosted.context import HostedContext
from gateway.http.bodies import BodyBuffers
from gateway.http.cors import cors_config, trusted_origins
from gateway.http.guard import RequestGuard
from gateway.http.kvroutes import KV_ROUTES
from gateway.http.middleware import RequestContextMiddleware, add_request_id, note_refusal
from gateway.http.operations import routes
from gateway.http.reload import ConfigWatcher
from gateway.http.routes import OPS_ROUTES
from gateway.http.spine import SocketSlots, Spine
from gateway.http.ui import UI_ROUTES, StatusPage
from gateway.mcp.accounting import ToolAccounting
from gateway.mcp.servers import HubSlot
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
    tel.watch(lambda: gw.backends, lambda: gw.breakers, lambda: gw.fleet.moves.pairs)
    tel.configure(frozenset(settings.config.models))  # the model label's values
    tools = ToolAccounting(tel.registry, lambda: tel.tracer)
    served = apis()

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        tel.start_tracing()  # an OTEL_* setting it cannot honour stops the start here
        store = open_store(settings.state)
        config = settings.config
        mcp = app.state.mcp = HubSlot(config.mcp, tools)
        services = _services(gw, store, config, mcp)
        for api in served:
            if api.services is not None:
                services.apis[api.name] = api.services(store, config, services)
        spine = _spine(services, config)
        # the hub first: the hosted tools and /mcp take the hub of the reloaded config
        gw.on_reload.append(lambda fresh: mcp.apply(fresh.mcp))
        gw.on_reload.append(lambda fresh: _reconfigure(spine, served, fresh, mcp))
        gw.on_reload.append(lambda fresh: tel.configure(frozenset(fresh.models)))
        app.state.gateway, app.state.telemetry = gw, tel
        app.state.services, app.state.spine = services, spine
        app.state.status_page = StatusPage()  # its uptime counts from here
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

    return _litestar(settings, tel, served, lifespan)


def _litestar(
    settings: AppSettings,
    telemetry: Telemetry,
    served: tuple[Api, ...],
    lifespan: Callable[[Litestar], AbstractAsyncContextManager[None]],
) -> Litestar:
    errors = ErrorShapes(served)
    return _Front(
        route_handlers=[*routes(served), *OPS_ROUTES, *KV_ROUTES, *UI_ROUTES],
        lifespan=[lifespan],
        # the guard first: a request it refuses is never parsed
        middleware=[
            DefineMiddleware(RequestGuard, trusted_origins=trusted_origins(settings.config.cors)),
            DefineMiddleware(RequestContextMiddleware, telemetry=telemetry),
        ],
        before_send=[add_request_id],
        exception_handlers={
            GatewayError: errors.gateway_error,
            HTTPException: errors.http_error,
            Exception: errors.unexpected_error,
        },
        openapi_config=None,
        event_emitter_backend=_NoEvents,
        cors_config=cors_config(settings.config.cors),
        logging_config=None,
    )


class _Front(Litestar):
    """Litestar without the plugins it adds for installed model libraries.

    Litestar adds its pydantic plugin (which loads pydantic's v1 compatibility package)
    and its attrs plugin whenever those libraries are installed. No route of the gateway
    takes or returns their models (the client APIs decode their own bodies, every other
    handler answers bytes), and the two cost every process 5.7 MB of memory."""

    @staticmethod
    def _get_default_plugins(plugins: list[PluginProtocol]) -> list[PluginProtocol]:
        return [*plugins, MsgspecDIPlugin()]


class _NoEvents(BaseEventEmitterBackend):
    """Litestar's event emitter, for an app with no listeners: its default starts a task
    group and a queue on anyio (15 modules) for events the gateway never emits."""

    def emit(self, event_id: str, *args: Any, **kwargs: Any) -> None:
        raise ImproperlyConfiguredException(f"no listener for event {event_id!r}")

    async def __aexit__(self, *exc_info: object) -> None:
        return None


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


def _services(gateway: Gateway, store: StateStore, config: GatewayConfig, mcp: HubSlot) -> Services:
    return Services(
        gateway=gateway,
        admission=Admission.build(store, config, deployment_limits=_deployment_limits(config)),
        cache=ResponseCache(store, _cache_rules(config)),
        hosted=HostedContext.of(config, mcp.hub),
    )


def _spine(services: Services, config: GatewayConfig) -> Spine:
    http = config.http
    return Spine(
        services,
        bodies=BodyBuffers(_mb(http.body_buffers_mb), _mb(http.body_buffers_per_key_mb)),
        sockets=SocketSlots(http.max_sockets, http.max_sockets_per_key),
        send_timeout_s=http.send_timeout_s,
        protect_ops=http.protect_ops,
        socket_idle_s=http.socket_idle_s,
    )


def _mb(megabytes: float) -> int:
    return int(megabytes * 1_000_000)


def _reconfigure(
    spine: Spine, served: tuple[Api, ...], config: GatewayConfig, mcp: HubSlot
) -> None:
    """A reloaded config, for the spine, the shared services and each API's state."""
    services = spine.services
    services.admission.apply(config, _deployment_limits(config))
    services.cache.rules = _cache_rules(config)
    services.hosted = HostedContext.of(config, mcp.hub)
    http = config.http
    spine.bodies.total = _mb(http.body_buffers_mb)
    spine.bodies.per_key = _mb(http.body_buffers_per_key_mb)
    spine.sockets.total, spine.sockets.per_key = http.max_sockets, http.max_sockets_per_key
    spine.send_timeout_s = http.send_timeout_s
    spine.protect_ops = http.protect_ops
    spine.socket_idle_s = http.socket_idle_s
    for api in served:
        if api.reconfigure is not None and api.name in services.apis:
            api.reconfigure(services.apis[api.name], config)


def _deployment_limits(config: GatewayConfig) -> dict[str, RateLimit]:
    return {d.name: RateLimit(rpm=d.rpm, tpm=d.tpm) for d in config.deployments}


def _cache_rules(config: GatewayConfig) -> dict[str, CacheRule]:
    return {name: route.cache for name, route in config.models.items() if route.cache}


class ErrorShapes:
    """Errors in the shape of the API called: the API of the route, else of the path's
    prefix (a path no operation serves), else OpenAI's."""

    def __init__(self, served: tuple[Api, ...]) -> None:
        self._served = served
        self._by_name = {api.name: api for api in served}

    def _api(self, request: Request[Any, Any, Any]) -> Api | None:
        handler = request.scope.get("route_handler")
        named = handler.opt.get("api") if handler is not None else None
        if isinstance(named, dict):  # APIs that share the path, by method
            named = named.get(request.method)
        if named is not None:
            return self._by_name.get(named)
        return api_of_path(self._served, request.scope["path"])

    def _answer(
        self,
        request: Request[Any, Any, Any],
        error: GatewayError,
        status: int,
        headers: dict[str, str],
    ) -> Response[bytes]:
        api = self._api(request)
        request_id = request.scope.get("state", {}).get("request_id")
        if api is None:
            status, body = openai_error(error, status, request_id)
        else:
            status, body = api.errors(error, status, request_id)
        if status == 401:
            headers = {**headers, "www-authenticate": "Bearer"}
        return Response(
            body, status_code=status, headers=headers or None, media_type="application/json"
        )

    def gateway_error(self, request: Request[Any, Any, Any], exc: GatewayError) -> Response[bytes]:
        note_refusal(request.scope.get("state", {}).get("log"), exc)
        return self._answer(request, exc, exc.status_code, exc.headers())

    def http_error(self, request: Request[Any, Any, Any], exc: HTTPException) -> Response[bytes]:
        status = exc.status_code
        error = GatewayError(str(exc.detail))
        error.error_type = _HTTP_TYPES.get(  # type: ignore[misc]
            status, "invalid_request_error" if status < 500 else "server_error"
        )
        return self._answer(request, error, status, dict(exc.headers or {}))

    def unexpected_error(self, request: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
        log.exception("unhandled_error", error_type=type(exc).__name__)
        error = GatewayError("The server had an error while processing your request.")
        return self._answer(request, error, 500, {})
