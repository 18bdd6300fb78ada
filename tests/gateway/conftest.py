"""Fixtures: one real redis-server for the session, and a store per test under its own prefix."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from gateway.state import MemoryStateStore, StateStore
from gateway.state.redis import RedisStateStore
from tests.redis_server import RedisServer, start_redis


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = start_redis(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture
def own_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A redis-server of the test's own, which it may stop and start again."""
    server = start_redis(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture
async def redis_store(redis_server: RedisServer) -> AsyncIterator[RedisStateStore]:
    store = RedisStateStore.from_url(redis_server.url, prefix=f"t{uuid.uuid4().hex[:8]}")
    yield store
    await store.aclose()


@pytest.fixture(params=["memory", "redis"])
async def store(
    request: pytest.FixtureRequest, redis_server: RedisServer
) -> AsyncIterator[StateStore]:
    """Each contract test runs on both stores."""
    if request.param == "memory":
        yield MemoryStateStore()
        return
    redis = RedisStateStore.from_url(redis_server.url, prefix=f"t{uuid.uuid4().hex[:8]}")
    yield redis
    await redis.aclose()
