from __future__ import annotations

from collections.abc import Callable

import pytest

from policies import (
    Candidate,
    Pricing,
    RequestFacts,
    estimate_cost_usd,
    predict_total_ms,
    predict_tpot_ms,
    predict_ttft_ms,
    queue_wait_ms,
    token_prices,
)
from policies.facts import DEFAULT_OUTPUT_TOKENS

Make = Callable[..., Candidate]
REQ = RequestFacts(prompt_tokens=1000, max_tokens=100)


def test_no_wait_while_a_slot_is_free(make: Make) -> None:
    cand = make("e", slots_busy=3, slots_total=4, ewma_service_ms=8000.0)
    assert queue_wait_ms(REQ, cand) == 0.0


def test_wait_is_requests_ahead_times_service_over_slots(make: Make) -> None:
    cand = make("e", slots_busy=4, slots_total=4, queue_depth=2, ewma_service_ms=8000.0)
    # this request is third in line: 3 x 8000 / 4
    assert queue_wait_ms(REQ, cand) == pytest.approx(6000.0)


def test_full_kv_cache_counts_as_no_free_slot(make: Make) -> None:
    cand = make(
        "e", slots_busy=2, slots_total=8, kv_used=97.0, kv_total=100.0, ewma_service_ms=800.0
    )
    assert queue_wait_ms(REQ, cand) == pytest.approx(800.0 / 8)


def test_wait_without_slots_uses_concurrency(make: Make) -> None:
    api = make("api", queue_depth=3, in_flight=10, max_concurrency=10, ewma_service_ms=1000.0)
    assert queue_wait_ms(REQ, api) == pytest.approx(300.0)
    assert queue_wait_ms(REQ, make("idle")) == 0.0


def test_wait_falls_back_to_own_service_time(make: Make) -> None:
    cand = make(
        "e",
        slots_busy=1,
        slots_total=1,
        prefill_tokens_per_s=1000.0,
        ewma_itl_ms=20.0,
    )
    # own service: 1000 ms prefill + 100 x 20 ms
    assert queue_wait_ms(REQ, cand) == pytest.approx(3000.0)
    assert queue_wait_ms(REQ, make("e", slots_busy=1, slots_total=1)) is None


def test_ttft_from_prefill_rate_and_base(make: Make) -> None:
    cand = make("e", prefill_tokens_per_s=4000.0, base_ttft_ms=30.0, ewma_ttft_ms=999.0)
    assert predict_ttft_ms(REQ, cand) == pytest.approx(250.0 + 30.0)


def test_recent_departures_slow_the_predicted_wait(make: Make) -> None:
    # Steady state says 64 slots / 4 s = 16 per second; only 2 finished per second lately.
    cand = make(
        "e",
        slots_busy=64,
        slots_total=64,
        queue_depth=3,
        ewma_service_ms=4000.0,
        departures_per_s=2.0,
    )
    assert queue_wait_ms(REQ, cand) == pytest.approx(4 / 2.0 * 1000.0)
    fast = make("e", slots_busy=64, slots_total=64, ewma_service_ms=4000.0, departures_per_s=50.0)
    assert queue_wait_ms(REQ, fast) == pytest.approx(1000.0 / 16)
    silent = make("e", slots_busy=64, slots_total=64, ewma_service_ms=4000.0, departures_per_s=0.0)
    assert queue_wait_ms(REQ, silent) == pytest.approx(1000.0 / 16)


def test_prompts_already_sent_are_prefilled_first(make: Make) -> None:
    cand = make("e", prefill_tokens_per_s=10000.0, prefill_backlog_tokens=3000, base_ttft_ms=5.0)
    # 300 ms for the backlog, 100 ms for this prompt, 5 ms fixed
    assert predict_ttft_ms(REQ, cand) == pytest.approx(405.0)
    queued = make(
        "e",
        prefill_tokens_per_s=10000.0,
        prefill_backlog_tokens=3000,
        slots_busy=4,
        slots_total=4,
        ewma_service_ms=2000.0,
    )
    # a 500 ms wait for a slot (2000 ms / 4 slots) outlasts the 300 ms backlog
    assert predict_ttft_ms(REQ, queued) == pytest.approx(1000.0 / 2 + 100.0)


def test_ttft_from_measured_ewma_when_no_rate(make: Make) -> None:
    assert predict_ttft_ms(REQ, make("api", ewma_ttft_ms=420.0)) == 420.0
    assert predict_ttft_ms(REQ, make("blind")) is None


def test_tpot_grows_with_occupancy(make: Make) -> None:
    idle = make("e", ewma_itl_ms=20.0, slots_busy=0, slots_total=16, decode_tokens_per_s=500.0)
    busy = make("e", ewma_itl_ms=20.0, slots_busy=15, slots_total=16, decode_tokens_per_s=500.0)
    assert predict_tpot_ms(idle) == 20.0  # share 2 ms < measured 20 ms
    assert predict_tpot_ms(busy) == pytest.approx(1000.0 * 16 / 500.0)
    assert predict_tpot_ms(make("api", ewma_itl_ms=12.0)) == 12.0
    assert predict_tpot_ms(make("blind")) is None


def test_total_latency(make: Make) -> None:
    cand = make("api", ewma_ttft_ms=300.0, ewma_itl_ms=10.0)
    assert predict_total_ms(REQ, cand) == pytest.approx(300.0 + 99 * 10.0)


def test_cost_and_prices(make: Make) -> None:
    api = make("api", pricing=Pricing(input_per_1m=2.0, output_per_1m=8.0))
    assert token_prices(api) == (2e-6, 8e-6)
    assert estimate_cost_usd(REQ, api) == pytest.approx(1000 * 2e-6 + 100 * 8e-6)
    half = make("half", pricing=Pricing(input_per_1m=1.0, usd_per_hour=3.6))
    assert token_prices(half) == (1e-6, None)
    assert estimate_cost_usd(REQ, half) is None


def test_output_tokens_guess() -> None:
    assert RequestFacts(5).output_tokens == DEFAULT_OUTPUT_TOKENS
    assert RequestFacts(5, max_tokens=64).output_tokens == 64
    assert RequestFacts(5, max_tokens=64, expected_output_tokens=20).output_tokens == 20
