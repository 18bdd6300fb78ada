"""Shared gateway state: one :class:`StateStore` interface, in-memory and Redis stores.

:class:`StateSettings` says where state lives. With ``redis_url`` every replica (and the
``shunter keys`` command) shares one Redis (a Redis Cluster when the URL is
``redis+cluster://host:port,host:port/0``); without it the gateway keeps its state in
process memory, which nothing else can see.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

from gateway.state.base import (
    LimitCheck,
    LimitState,
    Reservation,
    Spend,
    StateStore,
    StateUnavailable,
    StoreHealth,
)
from gateway.state.memory import MemoryStateStore

REDIS_URL_ENV = "SHUNTER_REDIS_URL"


class StateSettings(BaseModel):
    """Where shared state lives and how patiently to talk to it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    redis_url: str | None = None
    redis_cluster: bool = False
    key_prefix: str = Field(default="shunter", pattern=r"^[A-Za-z0-9_.:-]+$")
    timeout_s: float = Field(default=0.5, gt=0)
    probe_interval_s: float = Field(default=1.0, gt=0)

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, *, redis_url: str | None = None
    ) -> StateSettings:
        """Settings from ``SHUNTER_REDIS_URL``; an explicit ``redis_url`` wins."""
        env = os.environ if environ is None else environ
        return cls(redis_url=redis_url or env.get(REDIS_URL_ENV) or None)


def open_store(settings: StateSettings) -> StateStore:
    """The store ``settings`` describe. Redis connects lazily, on first use."""
    if settings.redis_url is None:
        return MemoryStateStore()
    from gateway.state.redis import RedisStateStore
    from gateway.state.redis_client import connect

    client = connect(
        settings.redis_url, cluster=settings.redis_cluster, timeout_s=settings.timeout_s
    )
    return RedisStateStore(
        client, prefix=settings.key_prefix, probe_interval_s=settings.probe_interval_s
    )


__all__ = [
    "REDIS_URL_ENV",
    "LimitCheck",
    "LimitState",
    "MemoryStateStore",
    "Reservation",
    "Spend",
    "StateSettings",
    "StateStore",
    "StateUnavailable",
    "StoreHealth",
    "open_store",
]
