"""Redis outage, for real: stop the redis-server, keep serving, start it again, recover.

Rate limits fail open to local counters (a warning once per outage, counters for metrics),
budgets fail closed (503), the cache misses, and the store reconnects by itself.
"""

from __future__ import annotations

import asyncio

import pytest
from structlog.testing import capture_logs

from gateway.admission.admit import Admission
from gateway.admission.cache import ResponseCache
from gateway.admission.keys import KeyRing
from gateway.admission.limits import Budgets, Limiter, LimitExceededError, RateLimit
from gateway.admission.session_limits import SessionGuard, SessionLimits, SessionTicket
from gateway.admission.sessions import SessionId
from gateway.config import CacheRule
from gateway.errors import ServiceUnavailableError
from gateway.protocol import ChatCompletion, ChatCompletionRequest, Usage
from gateway.state.redis import RedisStateStore
from policies import RequestFacts
from tests.redis_server import RedisServer

ONE = RequestFacts(prompt_tokens=1, max_tokens=1)  # one token in, one out

PROBE_S = 0.1


async def test_limits_fail_open_budgets_fail_closed_and_the_store_recovers(
    own_redis: RedisServer,
) -> None:
    store = RedisStateStore.from_url(own_redis.url, prefix="t", probe_interval_s=PROBE_S)
    limiter = Limiter(store)
    budgets = Budgets(store)
    limit = RateLimit(rpm=2)
    await limiter.reserve("key:a", "k", limit, 0)
    await budgets.check("key:b", "key 'b'", 1.0, 86400)
    assert limiter.stats.shared == 1

    with capture_logs() as logs:
        own_redis.stop()
        # limits: decided by local counters, still enforced per process
        for _ in range(2):
            grant = await limiter.reserve("key:a", "k", limit, 0)
            assert grant.local
        with pytest.raises(LimitExceededError):
            await limiter.reserve("key:a", "k", limit, 0)
        assert limiter.stats.local_fallbacks == 3
        # budgets: refused, retryable, 503
        with pytest.raises(ServiceUnavailableError) as caught:
            await budgets.check("key:b", "key 'b'", 1.0, 86400)
        assert caught.value.status_code == 503
        assert caught.value.code == "budget_unavailable"
        assert caught.value.headers() == {
            "retry-after": "5",
            "retry-after-ms": "5000",
            "x-should-retry": "true",
        }
        # spend that cannot be written is kept, and written after recovery
        await budgets.add("key:b", 86400, 0.25)
        assert budgets.stats.unrecorded_usd == pytest.approx(0.25)
        await asyncio.sleep(PROBE_S * 1.5)
        await limiter.reserve("key:c", "k", limit, 0)  # a second probe, same outage
        assert not store.health.available
        assert store.health.outages == 1 and store.health.errors >= 2

        own_redis.start()
        await asyncio.sleep(PROBE_S * 1.5)
        grant = await limiter.reserve("key:a", "k", limit, 0)
        assert not grant.local and store.health.available
        await budgets.add("key:b", 86400, 0.5)
        assert (await store.spend_get("key:b", 86400)).usd == pytest.approx(0.75)
        assert budgets.stats.unrecorded_usd == 0

    events = [(e["event"], e["log_level"]) for e in logs if e["event"].startswith("state_store")]
    assert events == [
        ("state_store_unavailable", "warning"),
        ("state_store_recovered", "info"),
    ]
    await store.aclose()


async def test_admission_keeps_serving_keys_without_budgets_during_an_outage(
    own_redis: RedisServer,
) -> None:
    store = RedisStateStore.from_url(own_redis.url, prefix="t", probe_interval_s=PROBE_S)
    gate = Admission(KeyRing(store), Limiter(store), Budgets(store))
    plain, _ = await gate.keys.create("plain", rpm=100)
    paid, _ = await gate.keys.create("paid", budget_usd=10)
    for secret in (plain, paid):  # both known (cached) before the outage
        key = await gate.authenticate(f"Bearer {secret}")
        await gate.settle(await gate.admit("m", ONE, key), None)

    own_redis.stop()
    ticket = await gate.admit("m", ONE, await gate.authenticate(f"Bearer {plain}"))
    assert ticket.key_grant is not None and ticket.key_grant.local
    assert gate.headers(ticket)["x-ratelimit-limit-requests"] == "100"
    await gate.admit_deployment(ticket, "d")
    await gate.settle(ticket, Usage.of(1, 1))
    with pytest.raises(ServiceUnavailableError):
        await gate.admit("m", ONE, await gate.authenticate(f"Bearer {paid}"))

    cache = ResponseCache(store, {"m": CacheRule()})
    request = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0}
    )
    key = cache.key(request, "key_a")
    assert key is not None
    assert await cache.get(key, ChatCompletion) is None
    assert cache.stats.errors == 1
    await store.aclose()


async def test_settlements_the_store_missed_are_written_once_it_is_back(
    own_redis: RedisServer,
) -> None:
    store = RedisStateStore.from_url(own_redis.url, prefix="t", probe_interval_s=PROBE_S)
    budgets = Budgets(store)
    budgets.settlements.retry_s = PROBE_S
    guard = SessionGuard(store, Limiter(store))
    guard.settlements.retry_s = PROBE_S
    key = (await KeyRing(store).create("paid", budget_usd=10))[1]
    secret_scope, window = f"key:{key.id}", key.budget_window_s
    session = SessionId(key.id, "s", "s", "header")
    ticket = SessionTicket(session, SessionLimits(budget_usd=5.0, idle_ttl_s=60), held=True)
    own_redis.stop()
    with capture_logs() as logs:
        await budgets.add(secret_scope, window, 0.25, "h1")  # the request ended: settle
        await guard.settle(ticket, "h1", 18, 0.25)
        assert budgets.stats.unrecorded_usd == pytest.approx(0.25)
        own_redis.start()
        # no further request: the background retry writes both
        for _ in range(100):
            if not budgets.settlements.total_usd and not guard.settlements.total_usd:
                break
            await asyncio.sleep(PROBE_S)
    assert (await store.spend_get(secret_scope, window)).usd == pytest.approx(0.25)
    books = {use.scope: use for use in await store.session_top(10)}
    assert (books[session.scope].usd, books[session.scope].tokens) == (0.25, 18)
    recorded = [e["what"] for e in logs if e["event"] == "spend_recorded"]
    assert sorted(recorded) == ["budget", "session"]
    await store.aclose()
