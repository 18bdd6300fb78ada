"""Stored responses on the state store (memory and Redis): owner only, TTL, size bound."""

from __future__ import annotations

import json

import pytest

from gateway.errors import NotFoundError
from gateway.ingress.store import ResponseStore
from gateway.state import MemoryStateStore, StateStore


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
    responses = ResponseStore(state, ttl_s=60, clock=lambda: now[0])
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
