"""Stored responses on the state store (memory and Redis): owner only, TTL, size bound."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from gateway.apis.responses.store import ResponseStore
from gateway.errors import NotFoundError
from gateway.state import MemoryStateStore, StateStore
from gateway.state.redis import RedisStateStore
from tests.redis_server import RedisServer


def record(owner: str, size: int = 10) -> str:
    return json.dumps({"owner": owner, "response": {"id": "r"}, "pad": "x" * size})


async def test_only_the_owner_reads_or_deletes(store: StateStore) -> None:
    responses = ResponseStore(store)
    assert await responses.save("resp_1", record("alice"))
    assert (await responses.load("resp_1", "alice"))["response"] == {"id": "r"}
    for attempt in (responses.load("resp_1", "bob"), responses.delete("resp_1", "bob")):
        with pytest.raises(NotFoundError):
            await attempt
    await responses.delete("resp_1", "alice")
    with pytest.raises(NotFoundError):
        await responses.load("resp_1", "alice")


async def test_records_expire_after_the_ttl() -> None:
    now = [1000.0]
    state = MemoryStateStore(clock=lambda: now[0])
    responses = ResponseStore(state, ttl_s=60)
    await responses.save("resp_1", record("a"))
    now[0] += 59
    await responses.load("resp_1", "a")
    now[0] += 2
    with pytest.raises(NotFoundError):
        await responses.load("resp_1", "a")


async def test_the_oldest_make_room_and_too_large_ones_are_not_kept(store: StateStore) -> None:
    one = len(record("a", 100))
    responses = ResponseStore(store, max_bytes=3 * one)
    for i in range(5):
        assert await responses.save(f"resp_{i}", record("a", 100))
    for i in (0, 1):  # deleted to make room for the last two
        with pytest.raises(NotFoundError):
            await responses.load(f"resp_{i}", "a")
    for i in (2, 3, 4):
        await responses.load(f"resp_{i}", "a")
    assert not await responses.save("resp_big", record("a", 4 * one))
    with pytest.raises(NotFoundError):
        await responses.load("resp_big", "a")


async def test_the_bound_holds_for_every_writer_of_one_store(redis_server: RedisServer) -> None:
    """Two gateways (or one restarted) on one Redis keep at most ``max_bytes`` in all,
    counted in Redis: the oldest records of either make room for the newest."""
    one = len(record("a", 100))
    prefix = f"t{uuid.uuid4().hex[:8]}"
    first, second = (RedisStateStore.from_url(redis_server.url, prefix=prefix) for _ in "ab")
    try:
        writers = [
            ResponseStore(first, max_bytes=3 * one),
            ResponseStore(second, max_bytes=3 * one),
        ]
        for i in range(8):
            assert await writers[i % 2].save(f"resp_{i}", record("a", 100))
            assert await first.bounded_bytes("responses") <= 3 * one
        kept = [i for i in range(8) if await first.shared_get(f"responses:resp_{i}")]
        assert kept == [5, 6, 7]
        await writers[0].delete("resp_6", "a")
        assert await second.bounded_bytes("responses") == 2 * one
    finally:
        await first.aclose()
        await second.aclose()


async def test_a_lapsed_record_leaves_the_count(store: StateStore) -> None:
    await store.bounded_set("g", "one", "x" * 10, ttl_s=0.1, max_bytes=100)
    await store.bounded_set("g", "two", "x" * 20, ttl_s=60, max_bytes=100)
    assert await store.bounded_bytes("g") == 30
    await asyncio.sleep(0.15)
    assert await store.shared_get("one") is None
    assert await store.bounded_set("g", "three", "x" * 80, ttl_s=60, max_bytes=100)
    assert await store.shared_get("two") == "x" * 20  # the lapsed one made room, not "two"
    assert await store.bounded_bytes("g") == 100
