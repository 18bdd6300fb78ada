"""The StateStore contract, run on the in-memory store and on a real redis-server."""

from __future__ import annotations

import asyncio

import pytest

from gateway.state import LimitCheck, MemoryStateStore, StateStore
from gateway.state.base import SessionCaps
from gateway.state.redis import RedisStateStore


def rpm(limit: int, cost: int = 1) -> LimitCheck:
    return LimitCheck("requests", limit, 60.0, cost)


def tpm(limit: int, cost: int) -> LimitCheck:
    return LimitCheck("tokens", limit, 60.0, cost)


async def test_reserve_takes_until_the_limit_then_refuses_with_retry_after(
    store: StateStore,
) -> None:
    remaining = []
    for _ in range(3):
        outcome = await store.reserve("key:a", [rpm(3)])
        assert outcome.allowed and outcome.retry_after_s is None
        remaining.append(outcome.states[0].remaining)
    assert remaining == [2, 1, 0]

    refused = await store.reserve("key:a", [rpm(3)])
    assert not refused.allowed
    assert refused.retry_after_s == pytest.approx(20.0, abs=0.5)  # one slot per 60/3 s
    assert refused.states[0].reset_s == pytest.approx(60.0, abs=0.5)
    # scopes are independent
    assert (await store.reserve("key:b", [rpm(3)])).allowed


async def test_reserve_is_all_or_nothing_across_limits(store: StateStore) -> None:
    assert (await store.reserve("key:a", [rpm(5), tpm(100, 80)])).allowed
    refused = await store.reserve("key:a", [rpm(5), tpm(100, 40)])
    assert not refused.allowed
    # the refused reservation took no request either
    probe = await store.reserve("key:a", [rpm(5, cost=0), tpm(100, 0)])
    assert [s.remaining for s in probe.states] == [4, 20]


async def test_a_cost_larger_than_the_limit_never_fits(store: StateStore) -> None:
    outcome = await store.reserve("key:a", [rpm(5), tpm(100, 101)])
    assert not outcome.allowed
    assert outcome.retry_after_s is None


async def test_adjust_gives_tokens_back_and_records_debt(store: StateStore) -> None:
    assert (await store.reserve("key:a", [tpm(100, 90)])).allowed
    await store.adjust("key:a", [tpm(100, -60)])  # used 30 of the 90 reserved
    state = (await store.reserve("key:a", [tpm(100, 0)])).states[0]
    assert state.remaining == 70
    await store.adjust("key:a", [tpm(100, 100)])  # used far more than reserved: debt
    assert not (await store.reserve("key:a", [tpm(100, 1)])).allowed
    await store.adjust("key:a", [tpm(100, -1000)])  # never more than whole again
    assert (await store.reserve("key:a", [tpm(100, 0)])).states[0].remaining == 100


async def test_spend_adds_up_per_scope_and_window(store: StateStore) -> None:
    assert (await store.spend_get("key:a", 86400)).usd == 0
    await store.spend_add("key:a", 86400, 0.25)
    spend = await store.spend_add("key:a", 86400, 0.5)
    assert spend.usd == pytest.approx(0.75)
    assert spend.window_end - spend.window_start == 86400
    assert spend.window_start % 86400 == 0
    assert (await store.spend_get("key:a", 86400)).usd == pytest.approx(0.75)
    assert (await store.spend_get("key:a", 3600)).usd == 0
    assert (await store.spend_get("key:b", 86400)).usd == 0
    assert (await store.spend_add("key:c", 86400, 1e-7)).usd == pytest.approx(1e-7)


async def test_holds_count_against_a_budget_until_settled(store: StateStore) -> None:
    await store.spend_add("key:a", 86400, 0.25)
    first = await store.spend_hold("key:a", 86400, "r1", 0.5, 60, budget_usd=1.0)
    assert first.allowed and first.spend.held_usd == pytest.approx(0.5)
    # 0.25 spent + 0.5 held is under 1.0: one more gets in, and takes the budget past it
    second = await store.spend_hold("key:a", 86400, "r2", 0.5, 60, budget_usd=1.0)
    assert second.allowed and second.spend.held_usd == pytest.approx(1.0)
    third = await store.spend_hold("key:a", 86400, "r3", 0.01, 60, budget_usd=1.0)
    assert not third.allowed
    assert (third.spend.usd, third.spend.held_usd) == pytest.approx((0.25, 1.0))
    # settling drops the hold and adds the real cost, in one step
    spend = await store.spend_settle("key:a", 86400, "r1", 0.1)
    assert (spend.usd, spend.held_usd) == pytest.approx((0.35, 0.5))
    assert (await store.spend_get("key:a", 86400)).held_usd == pytest.approx(0.5)
    # a hold replaced (the request moved to another deployment) is not counted twice
    await store.spend_hold("key:a", 86400, "r2", 0.2, 60)
    assert (await store.spend_get("key:a", 86400)).held_usd == pytest.approx(0.2)
    await store.spend_settle("key:a", 86400, "r2", 0.0)
    assert (await store.spend_get("key:a", 86400)).held_usd == 0
    assert (await store.spend_get("key:b", 86400)).held_usd == 0


async def test_a_hold_never_settled_lapses(store: StateStore) -> None:
    assert (await store.spend_hold("key:a", 3600, "r1", 5.0, 0.15, budget_usd=1.0)).allowed
    assert not (await store.spend_hold("key:a", 3600, "r2", 0.1, 60, budget_usd=1.0)).allowed
    await asyncio.sleep(0.25)  # its process died: the budget is not held forever
    assert (await store.spend_hold("key:a", 3600, "r2", 0.1, 60, budget_usd=1.0)).allowed
    assert (await store.spend_get("key:a", 3600)).held_usd == pytest.approx(0.1)


async def test_concurrent_holds_are_atomic(store: StateStore) -> None:
    holds = await asyncio.gather(
        *(store.spend_hold("key:a", 3600, f"r{i}", 0.3, 60, budget_usd=1.0) for i in range(20))
    )
    assert sum(h.allowed for h in holds) == 4  # 0, 0.3, 0.6, 0.9 are under 1.0


async def test_key_records_by_hash_and_id(store: StateStore) -> None:
    assert await store.key_count() == 0
    assert await store.key_list() == []
    await store.key_put("h1", "key_1", '{"n": 1}')
    await store.key_put("h2", "key_2", '{"n": 2}')
    await store.key_put("h1", "key_1", '{"n": 1, "revoked": true}')
    assert await store.key_get("h1") == '{"n": 1, "revoked": true}'
    assert await store.key_get("nope") is None
    assert await store.key_find("key_2") == ("h2", '{"n": 2}')
    assert await store.key_find("key_3") is None
    assert sorted(await store.key_list()) == ['{"n": 1, "revoked": true}', '{"n": 2}']
    assert await store.key_count() == 2


async def test_cache_values_expire(store: StateStore) -> None:
    await store.cache_set("k", b"\x00body", ttl_s=0.15)
    assert await store.cache_get("k") == b"\x00body"
    assert await store.cache_get("other") is None
    await asyncio.sleep(0.25)
    assert await store.cache_get("k") is None


async def test_shared_values_and_counters_expire(store: StateStore) -> None:
    await store.shared_set("deployment:a:cooldown", "1", ttl_s=0.15)
    assert await store.shared_get("deployment:a:cooldown") == "1"
    assert await store.shared_incr("deployment:a:fails", 1, ttl_s=0.15) == 1
    assert await store.shared_incr("deployment:a:fails", 2, ttl_s=10) == 3
    await store.shared_set("deployment:a:ttft_ms", "41.5", ttl_s=10)
    await store.shared_delete("deployment:a:ttft_ms")
    assert await store.shared_get("deployment:a:ttft_ms") is None
    await asyncio.sleep(0.25)
    assert await store.shared_get("deployment:a:cooldown") is None
    # the counter kept the TTL of its creation, so it expired too
    assert await store.shared_incr("deployment:a:fails", 1, ttl_s=10) == 1


async def test_a_shared_run_counts_until_a_later_success_starts_it_again(
    store: StateStore,
) -> None:
    assert await store.shared_run("failures:{a}", 100.0, 0.0, ttl_s=10) == 1
    assert await store.shared_run("failures:{a}", 101.0, 50.0, ttl_s=10) == 2  # success before
    assert await store.shared_get("failures:{a}") == "2 101.0"
    assert await store.shared_run("failures:{a}", 103.0, 102.0, ttl_s=0.15) == 1  # after
    await asyncio.sleep(0.25)
    assert await store.shared_get("failures:{a}") is None  # forgotten after its last event


async def test_a_notice_reaches_every_listener_and_none_before_it_listened(
    store: StateStore,
) -> None:
    await store.shared_publish("news", "unheard")
    heard: list[list[str]] = [[], []]

    async def listen(into: list[str]) -> None:
        async for message in store.shared_listen("news"):
            into.append(message)

    tasks = [asyncio.create_task(listen(into)) for into in heard]
    for _ in range(100):  # until both have subscribed (a Redis subscription takes a trip)
        await store.shared_publish("news", "ping")
        await asyncio.sleep(0.02)
        if all(heard):
            break
    await store.shared_publish("news", "opened")
    for _ in range(100):
        if all(into and into[-1] == "opened" for into in heard):
            break
        await asyncio.sleep(0.02)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert [into[-1] for into in heard] == ["opened", "opened"]
    assert all("unheard" not in into for into in heard)


async def test_scope_names_that_would_break_hash_tags_are_refused(store: StateStore) -> None:
    with pytest.raises(ValueError, match="invalid state scope"):
        await store.reserve("key:{x}", [rpm(1)])


async def test_ping(store: StateStore) -> None:
    assert await store.ping()


async def test_redis_and_memory_decide_alike(redis_store: RedisStateStore) -> None:
    memory = MemoryStateStore()
    costs = [30, 30, 30, 20, 5, 1, 0, 50]
    for cost in costs:
        checks = [rpm(6), tpm(100, cost)]
        a, b = await memory.reserve("key:a", checks), await redis_store.reserve("key:a", checks)
        assert a.allowed == b.allowed, cost
        assert [s.remaining for s in a.states] == [s.remaining for s in b.states], cost


async def test_a_settlement_written_twice_counts_once_on_redis(
    redis_store: RedisStateStore,
) -> None:
    # a settlement retried after an outage hid whether its first write landed
    held = await redis_store.spend_hold("key:twice", 3600, "h1", 0.5, 60, budget_usd=10)
    assert held.allowed
    for _ in range(2):
        spend = await redis_store.spend_settle("key:twice", 3600, "h1", 0.25)
    assert (spend.usd, spend.held_usd) == (0.25, 0.0)
    assert (await redis_store.spend_settle("key:twice", 3600, "h2", 0.25)).usd == 0.5
    caps = SessionCaps(budget_usd=10)
    assert (await redis_store.session_hold("session:k:twice", "h1", 0.5, 10, caps)).allowed
    for _ in range(2):
        use = await redis_store.session_settle("session:k:twice", "h1", 0.25, 7, 60)
    assert (use.usd, use.tokens, use.held_usd) == (0.25, 7, 0.0)
