"""The operations endpoints: health (liveness, readiness), metrics and the live figures of
the deployments (worker stats). The client APIs' routes come from the registry
(:mod:`gateway.http.operations`).

``/health/liveness`` is public; ``/metrics`` and readiness's figures need the master key
when ``http.protect_ops`` is on (:mod:`gateway.http.middleware`); worker stats need any
valid key.
"""

from __future__ import annotations

import os
from dataclasses import fields
from typing import Any

from litestar import Request, Response, get
from litestar.handlers import BaseRouteHandler
from prometheus_client import CONTENT_TYPE_LATEST

from backends.base import LiveStats
from gateway.dispatch import Gateway
from gateway.http.spine import Spine
from gateway.telemetry.instruments import Telemetry


def _gateway(request: Request[Any, Any, Any]) -> Gateway:
    gateway: Gateway = request.app.state.gateway
    return gateway


async def _caller(request: Request[Any, Any, Any]) -> None:
    """A valid key (401/403 without one when keys are configured)."""
    spine: Spine = request.app.state.spine
    await spine.services.admission.authenticate(request.headers.get("authorization"))


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
    gateway = _gateway(request)
    deployments = {
        name: {**_figures(b.stats(), links=True), "draining": gateway.draining}
        for name, b in sorted(gateway.backends.items())
    }
    return Response({"object": "worker.stats", "deployments": deployments})


def _figures(stats: LiveStats, *, links: bool) -> dict[str, Any]:
    """A backend's live figures as JSON; the prefix links it holds in full for a gateway
    that routes on them (``links``), else counted."""
    figures = {f.name: getattr(stats, f.name) for f in fields(stats)}
    held = stats.held_prefixes
    figures["held_prefixes"] = dict(held) if links else len(held)
    if not links:
        figures["held_sequences"] = len(stats.held_sequences)
    return figures


@get("/metrics")
async def metrics(request: Request[Any, Any, Any]) -> Response[bytes]:
    telemetry: Telemetry = request.app.state.telemetry
    return Response(telemetry.exposition(), media_type=CONTENT_TYPE_LATEST)


OPS_ROUTES: list[BaseRouteHandler] = [metrics, liveness, readiness, worker_stats]
