"""Live figures per deployment: what routing reads, and what they cost to keep."""

from __future__ import annotations

import tracemalloc

import pytest

from backends.base import LiveStats
from gateway.dispatch.health.live import (
    SESSIONS_REMEMBERED,
    TOKENS_PER_CHAR,
    WINDOW_S,
    DeploymentTracker,
)
from gateway.dispatch.health.sent import SENT_MAX, SENT_TTL_S


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def serve(tracker: DeploymentTracker, clock: Clock, requests: int, per_s: float) -> None:
    for _ in range(requests):
        attempt = tracker.begin(10)
        clock.now += 1 / per_s
        attempt.first_token()
        attempt.finish(5)


def test_departures_count_the_last_window() -> None:
    clock = Clock()
    tracker = DeploymentTracker(clock=clock)
    serve(tracker, clock, 300, per_s=10)  # 30 s at 10 a second
    rate = tracker.figures(LiveStats()).departures_per_s
    assert rate == pytest.approx(10, rel=0.05)
    clock.now += 2 * WINDOW_S
    assert tracker.figures(LiveStats()).departures_per_s is None


def test_what_is_kept_per_deployment_does_not_grow_with_traffic() -> None:
    """Nothing reads the figures here (the default policy never does): what the tracker
    keeps must still stay the same size at any request rate and count."""
    clock = Clock()
    tracker = DeploymentTracker(clock=clock)
    serve(tracker, clock, 2_000, per_s=1_000)
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        serve(tracker, clock, 100_000, per_s=1_000)  # 100 s of traffic
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
    assert grown < 16_000  # a request a second of bookkeeping would be ~3 MB here
    assert tracker.figures(LiveStats()).departures_per_s == pytest.approx(1_000, rel=0.05)


def test_prefixes_sent_count_as_held_until_the_engine_can_say_so() -> None:
    clock = Clock()
    tracker = DeploymentTracker(clock=clock)
    chain = (("sys", 1000), ("turn", 2000))
    reported = LiveStats(held_prefixes={"sys": 240, "older": 90})
    assert tracker.figures(reported).held_prefixes is reported.held_prefixes
    tracker.begin(500, chain)
    held = tracker.figures(reported).held_prefixes
    assert (held["sys"], held["turn"], held["older"]) == (250, 500, 90)
    assert set(held) == {"sys", "older", "turn"} and len(held) == 3
    clock.now += SENT_TTL_S + 0.1
    assert dict(tracker.figures(reported).held_prefixes) == {"sys": 240, "older": 90}


def test_a_mostly_cached_prompt_adds_only_its_new_part_to_the_prefill_backlog() -> None:
    clock = Clock()
    tracker = DeploymentTracker(clock=clock)
    reported = LiveStats(held_prefixes={"sys": 240, "turn": 480})
    assert tracker.figures(reported).prefill_backlog_tokens == 0
    follow_up = tracker.begin(600, (("sys", 1000), ("turn", 2000), ("turn2", 2500)))
    assert tracker.figures(reported).prefill_backlog_tokens == 120  # 500 of 2500 chars new
    stranger = tracker.begin(600, (("other", 2500),))
    assert tracker.figures(reported).prefill_backlog_tokens == 720
    follow_up.first_token()
    stranger.finish(None, failed=True)
    assert tracker.figures(reported).prefill_backlog_tokens == 0


def test_a_cached_prompt_is_learned_against_its_whole_estimate() -> None:
    """Only the uncached part of a follow-up waits in the backlog, but the upstream counts
    the whole prompt: that count is compared with the whole estimate, so a prompt counted
    as estimated teaches no ratio above one."""
    tracker = DeploymentTracker(clock=Clock())
    tracker.figures(LiveStats(held_prefixes={"sys": 240, "turn": 480}))
    follow_up = tracker.begin(600, (("sys", 1000), ("turn", 2000), ("turn2", 2500)))
    follow_up.first_token()
    follow_up.finish(10, prompt_tokens=600)
    assert tracker.expected_prompt(600) == 600


def test_the_engines_tokens_per_character_come_from_its_reports() -> None:
    """An engine reporting links the gateway sent says how many of its tokens a character
    is: each new report is folded in once, and links sent since are that deep."""
    clock = Clock()
    tracker = DeploymentTracker(clock=clock)
    assert tracker.figures(LiveStats()).tokens_per_char is None
    tracker.begin(500, (("sys", 1000), ("turn", 2000)))
    reported = LiveStats(held_prefixes={"sys": 750, "turn": 1500, "older": 90})
    figures = tracker.figures(reported)
    assert figures.tokens_per_char == pytest.approx(0.75)
    assert tracker.figures(reported).tokens_per_char == pytest.approx(0.75)  # once a report
    tracker.begin(700, (("sys", 1000), ("turn", 2000), ("turn2", 2800)))
    held = tracker.figures(reported).held_prefixes
    assert (held["sys"], held["turn2"]) == (750, 2100)  # not 700 estimated tokens x 1000/2800
    newer = LiveStats(held_prefixes={"sys": 1000, "turn": 2000, "turn2": 2800})
    assert tracker.figures(newer).tokens_per_char == pytest.approx(0.8)  # EWMA: 0.75 -> 1.0


def test_an_absurd_report_is_held_to_what_a_tokenizer_does() -> None:
    clock = Clock()
    tracker = DeploymentTracker(clock=clock)
    tracker.begin(10, (("sys", 10),))
    assert (
        tracker.figures(LiveStats(held_prefixes={"sys": 10**6})).tokens_per_char
        == (TOKENS_PER_CHAR[1])
    )
    other = DeploymentTracker(clock=clock)
    other.begin(10, (("sys", 10),))
    assert other.figures(LiveStats(held_prefixes={"other": 3})).tokens_per_char is None


def test_prefixes_sent_are_bounded() -> None:
    clock = Clock()
    tracker = DeploymentTracker(clock=clock)
    for i in range(SENT_MAX // 100 + 10):
        tracker.begin(100, tuple((f"r{i}-{j}", j + 1) for j in range(100)))
    held = tracker.figures(LiveStats()).held_prefixes
    assert len(held) == SENT_MAX and f"r{SENT_MAX // 100 + 9}-99" in held and "r0-0" not in held


def test_a_new_deployments_departures_count_over_the_time_it_has_been_up() -> None:
    """Five departures in the first five seconds are one a second, not one in six."""
    clock = Clock()
    tracker = DeploymentTracker(clock=clock)
    serve(tracker, clock, 5, per_s=1)
    assert tracker.figures(LiveStats()).departures_per_s == pytest.approx(1.0)


def test_the_prompt_a_deployment_reports_is_what_it_is_expected_to_count() -> None:
    tracker = DeploymentTracker(clock=Clock())
    assert tracker.expected_prompt(100) == 100  # nothing reported yet: the estimate
    attempt = tracker.begin(100, session="s1")
    attempt.first_token()
    attempt.finish(5, prompt_tokens=5000)  # a provider-side system prompt: 50 x
    assert tracker.expected_prompt(100) == 5000
    assert tracker.expected_prompt(200) == 10_000
    for _ in range(40):  # then many requests counted as estimated
        tracker.learn_prompt(100, 100, "other")
    assert tracker.expected_prompt(100) < 110
    # the conversation that reported 5000 keeps at least that: it only grows
    assert tracker.expected_prompt(100, "s1") == 5000
    assert tracker.expected_prompt(100, "new") < 110


def test_a_report_under_the_estimate_never_lowers_a_reservation() -> None:
    tracker = DeploymentTracker(clock=Clock())
    tracker.learn_prompt(1000, 10)
    assert tracker.expected_prompt(1000) == 1000


def test_what_is_remembered_of_sessions_is_bounded() -> None:
    tracker = DeploymentTracker(clock=Clock())
    tracker.learn_prompt(10, 5000, "oldest")
    for i in range(SESSIONS_REMEMBERED):
        tracker.learn_prompt(10, 10, f"s{i}")
    assert tracker.expected_prompt(10, "oldest") == 10  # forgotten: the bound holds
    tracker.learn_prompt(10, 5000, "newest")
    for i in range(SESSIONS_REMEMBERED - 1):
        tracker.learn_prompt(10, 10, f"t{i}")
    assert tracker.expected_prompt(10, "newest") == 5000
