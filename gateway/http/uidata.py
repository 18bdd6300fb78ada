"""What the status page shows, as one JSON-ready snapshot of a running gateway.

Deployments with their breaker and live figures (gateway-measured TTFT/TPOT, the engine's
queue, slots, KV, rates and prefix hits), the public models and their policies, the memory
plan of local deployments (worked out once per config, off the event loop), the last route
decisions, the KV caches moved between engines, the last hour a minute at a time
(:mod:`gateway.telemetry.history`), and, for the master key only, every virtual key's use
against its limits and budget.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from gateway.admission.keys import KeyRecord
from gateway.admission.limits import RateLimit
from gateway.apis.contract import Services
from gateway.dispatch import Gateway
from gateway.mcp.servers import HubSlot
from gateway.residency.placement import Placement, plan_deployments
from gateway.state.base import StateUnavailable
from gateway.telemetry.instruments import Telemetry

RECENT_SHOWN = 50
SESSIONS_SHOWN = 20
_GB = 1e9


@dataclass
class StatusData:
    """Builds snapshots; keeps the memory plan of the config version it was made for."""

    started: float = field(default_factory=time.time)
    _plan_version: str | None = None
    _plan: list[dict[str, Any]] = field(default_factory=list)

    async def snapshot(
        self,
        gateway: Gateway,
        telemetry: Telemetry,
        services: Services,
        *,
        admin: bool,
        tools: HubSlot | None = None,
    ) -> dict[str, Any]:
        """The page's data; ``keys`` only when ``admin``; the MCP servers and recent tool
        calls with ``tools``."""
        deployments = [_deployment(gateway, name) for name in sorted(gateway.backends)]
        served: dict[str, list[str]] = {}
        for model, route in gateway.config.models.items():
            for name in route.candidates:
                served.setdefault(name, []).append(model)
        for row in deployments:
            row["serves"] = sorted(served.get(row["name"], []))
        snapshot: dict[str, Any] = {
            "generated_at": time.time(),
            "gateway": {
                "status": _status(gateway, deployments),
                "config_version": gateway.config_version,
                "uptime_s": round(time.time() - self.started, 1),
                "requests_seen": telemetry.recent.total,
            },
            "deployments": deployments,
            "models": [
                {
                    "name": name,
                    "candidates": list(route.candidates),
                    "policy": route.policy.describe(),
                    "fallback": route.fallback,
                }
                for name, route in sorted(gateway.config.models.items())
            ],
            "memory": await self._memory(gateway),
            "decisions": telemetry.recent.last(RECENT_SHOWN),
            "kv_moves": kv_moves(gateway),
        }
        if tools is not None:
            snapshot["mcp_servers"] = mcp_servers(tools)
            snapshot["tool_calls"] = tools.accounting.last(RECENT_SHOWN)
        names: dict[str, str] = {}
        if admin:
            snapshot["keys"] = await key_usage(services)
            snapshot["sessions"] = await session_usage(services)
            names = {row["id"]: row["name"] for row in snapshot["keys"]}
        telemetry.history.sample()
        snapshot["history"] = telemetry.history.series(names)
        return snapshot

    async def _memory(self, gateway: Gateway) -> list[dict[str, Any]]:
        if self._plan_version != gateway.config_version:
            config = gateway.config
            placements = await asyncio.to_thread(
                plan_deployments, config.deployments, config.devices
            )
            self._plan = [_placement(p) for p in placements if p.plan is not None or p.problem]
            self._plan_version = gateway.config_version
        loaded = {name: backend.stats().loaded for name, backend in gateway.backends.items()}
        return [{**row, "loaded": loaded.get(row["deployment"])} for row in self._plan]


def mcp_servers(tools: HubSlot) -> list[dict[str, Any]]:
    """Each configured MCP server: its kind, whether it is connected, its restarts."""
    rows = []
    for name in tools.hub.servers:
        upstream = tools.hub.upstream(name)
        if upstream is not None:
            kind = "stdio" if upstream.settings.kind == "stdio" else "http"
            rows.append(
                {"name": name, "kind": kind, "connected": upstream.connected,
                 "restarts": upstream.restarts}
            )  # fmt: skip
    return rows


def kv_moves(gateway: Gateway) -> dict[str, Any]:
    """The KV moves made lately (newest first) and the tallies per deployment pair."""
    log = gateway.fleet.moves
    recent = [
        {
            "at": move.at,
            "source": move.source,
            "target": move.target,
            "cause": move.cause,
            "outcome": move.outcome,
            "bytes": move.n_bytes,
            "tokens": move.tokens,
            "seconds": round(move.seconds, 3),
            "error": move.error,
        }
        for move in reversed(log.recent)
    ]
    pairs = [
        {
            "source": source,
            "target": target,
            "moved": tally.moved,
            "failed": tally.failed,
            "bytes": tally.n_bytes,
            "seconds": round(tally.seconds, 3),
        }
        for (source, target), tally in sorted(log.pairs.items())
    ]
    return {"recent": recent, "pairs": pairs}


def _deployment(gateway: Gateway, name: str) -> dict[str, Any]:
    settings = gateway.config.deployment(name)
    stats = gateway.backends[name].stats()
    health = gateway.deployment_health(name)
    tracker = gateway.trackers.get(name)
    figures = tracker.figures(stats) if tracker is not None else None
    breaker = gateway.breakers.get(name)
    kv = stats.kv_used / stats.kv_total if stats.kv_used is not None and stats.kv_total else None
    return {
        "name": name,
        "backend": settings.backend,
        "model": settings.model,
        "health": "stalled" if stats.stalled else str(health["breaker"]),
        "breaker": health["breaker"],
        "breaker_retry_in_s": health["breaker_retry_in_s"],
        "context_learned": health["context_learned"],
        "ttft_ms": _round(figures.ewma_ttft_ms if figures else None),
        "tpot_ms": _round(figures.ewma_itl_ms if figures else None),
        "error_rate": _round(figures.error_rate if figures else None, 3),
        "in_flight": stats.in_flight,
        "queue_depth": stats.queue_depth,
        "slots_busy": stats.slots_busy,
        "slots_total": stats.slots_total,
        "kv_usage": _round(kv, 3),
        "prefill_tokens_per_s": _round(stats.prefill_tokens_per_s),
        "decode_tokens_per_s": _round(stats.decode_tokens_per_s),
        "prefix_hit_rate": _round(stats.prefix_hit_rate, 3),
        "held_prefixes": len(stats.held_prefixes),
        "loaded": stats.loaded,
        "stalled": stats.stalled,
        "fallbacks": dict(breaker.fallbacks) if breaker is not None else {},
    }


def _status(gateway: Gateway, deployments: list[dict[str, Any]]) -> str:
    if gateway.draining:
        return "shutting_down"
    if not gateway.ready:
        return "starting"
    return "stalled" if any(d["stalled"] for d in deployments) else "ready"


def _placement(placement: Placement) -> dict[str, Any]:
    plan = placement.plan
    if plan is None:
        return {"deployment": placement.deployment, "fit": "unknown", "note": placement.note}
    return {
        "deployment": placement.deployment,
        "device": plan.device,
        "fit": plan.fit,
        "required_gb": round(plan.required_bytes / _GB, 2),
        "available_gb": round(plan.available_bytes / _GB, 2),
        "context": plan.context,
        "slots": plan.slots,
        "note": plan.detail,
    }


async def key_usage(services: Services) -> list[dict[str, Any]]:
    """Every virtual key with its limits, what is left of them now, and its spend in the
    current budget window (``null`` where the state store cannot say)."""
    keys = services.admission.keys
    try:
        records = await keys.list_keys()
    except StateUnavailable:
        return []
    now = time.time()
    return [await _key_row(services, record, now) for record in records]


async def _key_row(services: Services, record: KeyRecord, now: float) -> dict[str, Any]:
    store = services.admission.keys.store
    scope = f"key:{record.id}"
    row: dict[str, Any] = {
        "id": record.id,
        "name": record.name,
        "status": record.status(now),
        "models": list(record.models) if record.models is not None else None,
        "rpm": record.rpm,
        "tpm": record.tpm,
        "budget_usd": record.budget_usd,
        "rpm_remaining": None,
        "tpm_remaining": None,
        "spent_usd": None,
        "budget_resets_at": None,
    }
    try:
        checks = RateLimit(rpm=record.rpm, tpm=record.tpm).checks(0, 0)
        if checks:  # a zero-cost reservation reads what is left without taking any
            outcome = await store.reserve(scope, checks)
            for state in outcome.states:
                row[f"{'rpm' if state.name == 'requests' else 'tpm'}_remaining"] = state.remaining
        spend = await store.spend_get(scope, record.budget_window_s)
        row["spent_usd"] = round(spend.usd, 6)
        row["budget_resets_at"] = spend.window_end
    except StateUnavailable:
        pass
    return row


async def session_usage(services: Services) -> list[dict[str, Any]]:
    """The sessions that spent most, with their key, requests, tokens, dollars and state
    (``active``, or ``stopped`` and why)."""
    rows = []
    for use in await services.admission.sessions.top(SESSIONS_SHOWN):
        info = dict(use.info)
        label = info.get("label", "")
        rows.append(
            {
                "id": use.scope.rsplit(":", 1)[-1],
                "label": label if len(label) <= 24 else label[:21] + "...",
                "key_id": info.get("key_id"),
                "key_name": info.get("key_name"),
                "requests": use.requests,
                "tokens": use.tokens,
                "spent_usd": round(use.usd, 6),
                "state": "stopped" if use.stopped else "active",
                "stopped_by": use.stopped or None,
                "last_at": use.last or None,
            }
        )
    return rows


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)
