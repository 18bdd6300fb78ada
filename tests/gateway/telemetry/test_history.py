"""The last hour a minute at a time: what each finished request adds, percentiles read
from the latency counters, old minutes reused, and every table bounded."""

from __future__ import annotations

from typing import Any

from gateway.telemetry.history import BOUNDS_MS, MAX_NAMES, MINUTES, OTHER, History

START = 1_800_000_000.0  # a minute boundary


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


def request(**facts: Any) -> dict[str, Any]:
    return {"ttft_ms": 120.0, "prompt_tokens": 10, "completion_tokens": 5, **facts}


def test_a_minute_counts_requests_errors_tokens_and_spend() -> None:
    clock = Clock()
    history = History(clock)
    history.add(request(cost_usd=0.5, key_id="k1"), "chat", 200, 0.25)
    history.add(request(cost_usd=0.25, key_id="k2", cache="hit"), "chat", 200, 0.01)
    history.add(request(), "tiny", 429, 0.002)
    history.add({}, "unknown", 502, 1.0)
    series = history.series({"k1": "team-a"})
    assert len(series["minutes"]) == MINUTES and series["minutes"][-1] == START
    assert series["requests"][-1] == 4 and series["requests"][:-1] == [0] * (MINUTES - 1)
    assert (series["client_errors"][-1], series["errors"][-1]) == (1, 1)
    assert (series["input_tokens"][-1], series["output_tokens"][-1]) == (30, 15)
    assert series["cache_hits"][-1] == 1
    assert series["spend_by_model"] == {"chat": [0.0] * (MINUTES - 1) + [0.75]}
    assert series["spend_by_key"]["team-a"][-1] == 0.5  # a key id shown by its name
    assert series["spend_by_key"]["k2"][-1] == 0.25
    assert series["duration_p50_ms"][:-1] == [None] * (MINUTES - 1)  # nothing measured


def test_percentiles_come_within_a_quarter_octave() -> None:
    history = History(Clock())
    for ms in range(1, 1001):
        history.add({"ttft_ms": ms / 10}, "chat", 200, ms / 1000)
    series = history.series()
    p50, p95 = series["duration_p50_ms"][-1], series["duration_p95_ms"][-1]
    assert 500 <= p50 <= 500 * 2**0.25 and 950 <= p95 <= 950 * 2**0.25
    assert 50 <= series["ttft_p50_ms"][-1] <= 50 * 2**0.25
    history.add({}, "chat", 200, 10_000_000)  # past the last bound: counted at the last
    assert BOUNDS_MS[-1] > 1_000_000


def test_an_hour_old_minute_is_reused_and_the_ring_stays_sixty_long() -> None:
    clock = Clock()
    history = History(clock)
    history.add(request(), "chat", 200, 0.1)
    clock.now += 30 * 60
    history.add(request(), "chat", 200, 0.1)
    series = history.series()
    assert series["requests"][-1] == 1 and series["requests"][-31] == 1
    clock.now += 3 * 3600 + 30 * 60  # four hours on: the first minute's slot again
    for _ in range(3):
        history.add(request(), "chat", 200, 0.1)
    series = history.series()
    assert sum(series["requests"]) == 3 and series["requests"][-1] == 3
    assert len(history._ring) == MINUTES


def test_spend_keeps_a_bounded_number_of_names_a_minute() -> None:
    history = History(Clock())
    for index in range(MAX_NAMES + 15):
        history.add(request(cost_usd=0.01, key_id=f"key-{index}"), "chat", 200, 0.1)
    spend = history.series()["spend_by_key"]
    assert len(spend) == MAX_NAMES + 1 and round(spend[OTHER][-1], 6) == 0.15


def test_two_keys_with_one_name_stay_apart() -> None:
    history = History(Clock())
    history.add(request(cost_usd=0.2, key_id="a1"), "chat", 200, 0.1)
    history.add(request(cost_usd=0.1, key_id="b2"), "chat", 200, 0.1)
    spend = history.series({"a1": "agents", "b2": "agents"})["spend_by_key"]
    assert list(spend) == ["agents (a1)", "agents (b2)"]


def test_engine_figures_are_sampled_at_most_every_few_seconds() -> None:
    clock = Clock()
    history = History(clock)
    samples = iter([(3, 0.5), (7, 0.25), (1, None)])
    history.sampler = lambda: next(samples)
    history.add(request(), "chat", 200, 0.1)  # samples (3, 0.5)
    clock.now += 1
    history.add(request(), "chat", 200, 0.1)  # too soon: no sample
    clock.now += 5
    history.add(request(), "chat", 200, 0.1)  # samples (7, 0.25)
    history.sample()  # the page asks: (1, None)
    series = history.series()
    assert series["queue_max"][-1] == 7
    assert series["prefix_hit_rate"][-1] == 0.375
    assert series["queue_max"][-2] is None  # a minute with no sample
