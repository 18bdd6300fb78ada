"""Session books on both stores: holds checked against the caps atomically, settled to
what requests used, refusals that say why, the biggest spenders, idle sessions forgotten."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from gateway.state.base import SessionCaps, StateStore
from gateway.state.memory import MemoryStateStore
from gateway.state.redis import RedisStateStore
from tests.redis_server import RedisServer

SCOPE = "session:key_a:s1"
INFO = (("key_name", "ci"), ("label", "agent-1"))


def hold_id() -> str:
    return uuid.uuid4().hex


async def test_holds_until_the_budget_is_held_then_refuses(store: StateStore) -> None:
    caps = SessionCaps(budget_usd=0.10)
    held = [await store.session_hold(SCOPE, hold_id(), 0.02, 10, caps, INFO) for _ in range(6)]
    assert [h.allowed for h in held] == [True] * 5 + [False]
    refused = held[-1]
    assert refused.reason == "budget"
    assert refused.use.held_usd == pytest.approx(0.10)
    # held by requests in flight, not spent: the session is not stopped
    top = await store.session_top(5)
    assert top[0].stopped == "" and top[0].requests == 5


async def test_settling_replaces_the_hold_with_the_cost(store: StateStore) -> None:
    caps = SessionCaps(budget_usd=0.05, max_tokens=1000)
    first = hold_id()
    assert (await store.session_hold(SCOPE, first, 0.04, 100, caps, INFO)).allowed
    use = await store.session_settle(SCOPE, first, 0.01, 30, caps.idle_ttl_s)
    assert use.usd == pytest.approx(0.01)
    assert (use.tokens, use.held_usd) == (30, 0)
    assert (await store.session_hold(SCOPE, hold_id(), 0.04, 100, caps, INFO)).allowed


async def test_spent_sessions_are_stopped_and_say_why(store: StateStore) -> None:
    caps = SessionCaps(budget_usd=0.05)
    one = hold_id()
    await store.session_hold(SCOPE, one, 0.04, 10, caps, INFO)
    await store.session_settle(SCOPE, one, 0.04, 10, caps.idle_ttl_s)
    refused = await store.session_hold(SCOPE, hold_id(), 0.02, 10, caps, INFO)
    assert not refused.allowed and refused.reason == "budget"
    (top,) = await store.session_top(5)
    assert top.stopped == "budget" and top.usd == pytest.approx(0.04)
    assert dict(top.info)["key_name"] == "ci"
    # a request that fits what is left is let in, and the session runs again
    assert (await store.session_hold(SCOPE, hold_id(), 0.01, 10, caps, INFO)).allowed
    (top,) = await store.session_top(5)
    assert top.stopped == ""


async def test_token_caps_count_the_tokens_held_and_used(store: StateStore) -> None:
    caps = SessionCaps(max_tokens=100)
    one = hold_id()
    assert (await store.session_hold(SCOPE, one, 0.0, 60, caps)).allowed
    refused = await store.session_hold(SCOPE, hold_id(), 0.0, 60, caps)
    assert not refused.allowed and refused.reason == "tokens"
    await store.session_settle(SCOPE, one, 0.0, 20, caps.idle_ttl_s)
    assert (await store.session_hold(SCOPE, hold_id(), 0.0, 60, caps)).allowed


async def test_concurrent_holds_never_pass_the_budget(store: StateStore) -> None:
    caps = SessionCaps(budget_usd=0.07)
    held = await asyncio.gather(
        *(store.session_hold(SCOPE, hold_id(), 0.01, 1, caps) for _ in range(30))
    )
    assert sum(h.allowed for h in held) == 7


async def test_sessions_are_kept_apart_and_listed_by_spend(store: StateStore) -> None:
    caps = SessionCaps(budget_usd=1.0)
    for scope, usd in (("session:k:a", 0.3), ("session:k:b", 0.5), ("session:j:a", 0.1)):
        one = hold_id()
        await store.session_hold(scope, one, usd, 5, caps)
        await store.session_settle(scope, one, usd, 5, caps.idle_ttl_s)
    top = await store.session_top(2)
    assert [u.scope for u in top] == ["session:k:b", "session:k:a"]


async def test_a_stop_is_recorded_with_its_reason(store: StateStore) -> None:
    use = await store.session_stop(SCOPE, "loop", 60.0, INFO)
    assert use.stopped == "loop"
    (top,) = await store.session_top(5)
    assert top.stopped == "loop"


async def test_idle_sessions_are_forgotten() -> None:
    now = [1000.0]
    store = MemoryStateStore(clock=lambda: now[0])
    caps = SessionCaps(budget_usd=0.05, idle_ttl_s=60.0)
    one = hold_id()
    await store.session_hold(SCOPE, one, 0.05, 1, caps)
    await store.session_settle(SCOPE, one, 0.05, 1, 60.0)
    assert not (await store.session_hold(SCOPE, hold_id(), 0.01, 1, caps)).allowed
    now[0] += 61
    assert await store.session_top(5) == []
    assert (await store.session_hold(SCOPE, hold_id(), 0.01, 1, caps)).allowed


async def test_memory_keeps_a_bounded_number_of_sessions() -> None:
    store = MemoryStateStore(max_sessions=3)
    for i in range(10):
        await store.session_stop(f"session:k:{i}", "loop", 60.0)
    assert len(await store.session_top(100)) == 3


async def test_redis_session_keys_expire_when_the_session_idles(
    redis_server: RedisServer,
) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    store = RedisStateStore.from_url(redis_server.url, prefix=prefix)
    try:
        caps = SessionCaps(budget_usd=1.0, idle_ttl_s=120.0)
        one = hold_id()
        await store.session_hold(SCOPE, one, 0.01, 5, caps, INFO)
        await store.session_settle(SCOPE, one, 0.01, 5, caps.idle_ttl_s)
    finally:
        await store.aclose()
    for key in (f"{prefix}:{{{SCOPE}}}:session", f"{prefix}:sessions"):
        reply = redis_server.command("PTTL", key) or ""
        assert reply.startswith(":"), reply
        assert 0 < int(reply[1:]) <= 120_000
