"""Rate limits (GCRA over time, headers, 429s) and budgets (fail closed, insufficient_quota)."""

from __future__ import annotations

import math
import time

import pytest

from gateway.admission.limits import (
    Budgets,
    Limiter,
    LimitExceededError,
    RateLimit,
    format_duration,
    ratelimit_headers,
)
from gateway.errors import RateLimitError
from gateway.state import LimitState, MemoryStateStore, StateStore


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def test_durations_read_like_openai_resets() -> None:
    assert format_duration(0.02) == "20ms"
    assert format_duration(0) == "0ms"
    assert format_duration(1) == "1s"
    assert format_duration(1.5) == "1.5s"
    assert format_duration(360) == "6m0s"
    assert format_duration(86.4) == "1m26.4s"


def test_headers_report_the_tightest_limit_of_each_kind() -> None:
    headers = ratelimit_headers(
        [
            LimitState("requests", 100, 40, 30.0),
            LimitState("requests", 10, 3, 42.0),
            LimitState("tokens", 1000, 900, 6.0),
        ]
    )
    assert headers == {
        "x-ratelimit-limit-requests": "10",
        "x-ratelimit-remaining-requests": "3",
        "x-ratelimit-reset-requests": "42s",
        "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-remaining-tokens": "900",
        "x-ratelimit-reset-tokens": "6s",
    }


async def test_requests_refill_one_per_interval() -> None:
    clock = Clock()
    limiter = Limiter(MemoryStateStore(clock=clock))
    limit = RateLimit(rpm=3)
    for _ in range(3):
        await limiter.reserve("key:a", "key 'a'", limit, 0)
    with pytest.raises(LimitExceededError) as caught:
        await limiter.reserve("key:a", "key 'a'", limit, 0)
    assert caught.value.retry_after == pytest.approx(20.0)
    clock.now += 19.9
    with pytest.raises(LimitExceededError):
        await limiter.reserve("key:a", "key 'a'", limit, 0)
    clock.now += 0.1
    grant = await limiter.reserve("key:a", "key 'a'", limit, 0)
    assert grant.states[0].remaining == 0
    assert limiter.stats.rejected == 2


async def test_a_429_carries_retry_after_and_ratelimit_headers(store: StateStore) -> None:
    limiter = Limiter(store)
    limit = RateLimit(rpm=2, tpm=1000)
    started = time.monotonic()
    await limiter.reserve("key:a", "key 'ci'", limit, 600)
    with pytest.raises(LimitExceededError) as caught:
        await limiter.reserve("key:a", "key 'ci'", limit, 600)
    error = caught.value
    assert isinstance(error, RateLimitError) and error.status_code == 429
    body = error.to_body()["error"]
    assert body["type"] == "rate_limit_error" and body["code"] == "rate_limit_exceeded"
    assert "key 'ci'" in body["message"] and "tokens per min (TPM)" in body["message"]
    headers = error.headers()
    # 400 tokens are left; the missing 200 refill in 200 * 60 / 1000 = 12 s
    assert headers["retry-after"] == "12"
    assert 11_500 < int(headers["retry-after-ms"]) <= 12_000
    assert headers["x-ratelimit-remaining-requests"] == "1"
    # 400, plus what refilled between the two reservations: a token per 60 ms
    refilled = math.ceil((time.monotonic() - started) / 0.06)
    assert 400 <= int(headers["x-ratelimit-remaining-tokens"]) <= 400 + refilled
    assert headers["x-ratelimit-limit-tokens"] == "1000"
    assert "x-should-retry" not in headers


async def test_a_request_larger_than_the_tpm_limit_is_not_retryable() -> None:
    limiter = Limiter(MemoryStateStore())
    with pytest.raises(LimitExceededError) as caught:
        await limiter.reserve("key:a", "key 'ci'", RateLimit(tpm=1000), 5000)
    assert "Request too large" in caught.value.message
    assert caught.value.headers()["x-should-retry"] == "false"
    assert "retry-after" not in caught.value.headers()


async def test_reconcile_returns_unused_tokens_and_release_returns_everything(
    store: StateStore,
) -> None:
    limiter = Limiter(store)
    limit = RateLimit(rpm=10, tpm=1000)
    grant = await limiter.reserve("key:a", "k", limit, 800)
    await limiter.reconcile(grant, 300)
    after = await limiter.reserve("key:a", "k", limit, 0)
    assert [s.remaining for s in after.states] == [8, 700]
    await limiter.release(grant)
    again = await limiter.reserve("key:a", "k", limit, 0)
    assert [s.remaining for s in again.states] == [8, 1000]


async def test_no_limits_configured_means_nothing_to_check() -> None:
    grant = await Limiter(MemoryStateStore()).reserve("key:a", "k", RateLimit(), 10**9)
    assert grant.states == ()


async def test_budget_exhaustion_is_429_insufficient_quota_without_retry(
    store: StateStore,
) -> None:
    budgets = Budgets(store)
    assert (await budgets.check("key:a", "key 'ci'", 1.0, 86400)).usd == 0
    await budgets.add("key:a", 86400, 0.6)
    await budgets.check("key:a", "key 'ci'", 1.0, 86400)
    await budgets.add("key:a", 86400, 0.6)
    with pytest.raises(RateLimitError) as caught:
        await budgets.check("key:a", "key 'ci'", 1.0, 86400)
    error = caught.value
    assert error.status_code == 429
    assert error.to_body()["error"]["code"] == "insufficient_quota"
    assert error.headers() == {"x-should-retry": "false"}
    assert "$1.2000 of $1.00" in error.message
    assert budgets.stats.exhausted == 1
