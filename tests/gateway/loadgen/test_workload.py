"""Workload pieces of the load generator: distributions, prompts, levels, bounds, statistics."""

from __future__ import annotations

import random

import pytest

from gateway.loadgen import (
    Bounds,
    Distribution,
    Level,
    Percentiles,
    RequestResult,
    Slo,
    Workload,
    WorkloadError,
    parse_levels,
)
from gateway.loadgen.report import percentile
from gateway.loadgen.workload import WORDS, poisson_gaps, synth_text


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("128", Distribution("fixed", 128)),
        ("fixed:64", Distribution("fixed", 64)),
        ("uniform:10-20", Distribution("uniform", 10, 20)),
        ("uniform:10,20", Distribution("uniform", 10, 20)),
        ("normal:100,15", Distribution("normal", 100, 15)),
    ],
)
def test_distribution_parse(spec: str, expected: Distribution) -> None:
    assert Distribution.parse(spec) == expected
    assert Distribution.parse(str(expected)) == expected


@pytest.mark.parametrize("spec", ["", "0", "x", "uniform:20-10", "normal:5", "gamma:1,2"])
def test_distribution_parse_rejects(spec: str) -> None:
    with pytest.raises(WorkloadError):
        Distribution.parse(spec)


def test_distribution_samples_stay_in_range() -> None:
    rng = random.Random(1)
    uniform = [Distribution("uniform", 10, 20).sample(rng) for _ in range(500)]
    assert min(uniform) >= 10 and max(uniform) <= 20
    normal = [Distribution("normal", 3, 10).sample(rng) for _ in range(500)]
    assert min(normal) >= 1  # clipped
    assert {Distribution("fixed", 7).sample(rng) for _ in range(10)} == {7}


def test_requests_are_deterministic_and_sized() -> None:
    workload = Workload(Distribution("uniform", 5, 50), Distribution("fixed", 16), seed=3)
    first = [r for _, r in zip(range(20), workload.requests(), strict=False)]
    again = [r for _, r in zip(range(20), workload.requests(), strict=False)]
    assert first == again
    for index, request in enumerate(first):
        assert request.index == index
        assert request.max_tokens == 16
        assert not request.shared_prefix
        [message] = request.messages
        assert message["role"] == "user"
        assert len(message["content"].split()) == request.prompt_words
        assert 5 <= request.prompt_words <= 50
    other = Workload(Distribution("uniform", 5, 50), Distribution("fixed", 16), seed=4)
    assert next(other.requests()) != first[0]


def test_shared_prefix_ratio() -> None:
    workload = Workload(
        Distribution("fixed", 8),
        Distribution("fixed", 8),
        shared_prefix_ratio=0.5,
        shared_prefix_tokens=40,
        seed=0,
    )
    requests = [r for _, r in zip(range(400), workload.requests(), strict=False)]
    shared = [r for r in requests if r.shared_prefix]
    assert 150 < len(shared) < 250
    prefixes = {r.messages[0]["content"] for r in shared}
    assert prefixes == {workload.shared_prefix()}
    assert all(r.messages[0]["role"] == "system" for r in shared)
    assert all(len(r.messages) == 1 for r in requests if not r.shared_prefix)
    everyone = Workload(Distribution("fixed", 8), Distribution("fixed", 8), shared_prefix_ratio=1)
    assert all(r.shared_prefix for _, r in zip(range(20), everyone.requests(), strict=False))


def test_synth_text_uses_common_words() -> None:
    text = synth_text(random.Random(0), 30)
    assert len(text.split()) == 30
    assert set(text.split()) <= set(WORDS)


def test_parse_levels() -> None:
    assert parse_levels(None, None) == [Level("concurrency", 1)]
    assert [lv.label for lv in parse_levels("1,4,8", None)] == ["c=1", "c=4", "c=8"]
    assert [lv.label for lv in parse_levels(None, "0.5,2")] == ["rate=0.5/s", "rate=2/s"]
    for bad in (("1,4", "2"), ("0", None), ("1.5", None), (None, "-1"), ("a", None)):
        with pytest.raises(WorkloadError):
            parse_levels(*bad)


def test_bounds_refuse_unbounded() -> None:
    with pytest.raises(WorkloadError, match="unbounded"):
        Bounds()
    with pytest.raises(WorkloadError):
        Bounds(duration_s=0)
    with pytest.raises(WorkloadError):
        Bounds(max_requests=0)
    assert Bounds(duration_s=1).max_requests is None


def test_poisson_gaps_mean() -> None:
    gaps = [g for _, g in zip(range(4000), poisson_gaps(10.0, seed=0), strict=False)]
    assert 0.09 < sum(gaps) / len(gaps) < 0.11


def test_percentile_matches_linear_interpolation() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == pytest.approx(50.5)
    assert percentile(values, 90) == pytest.approx(90.1)
    assert percentile(values, 99) == pytest.approx(99.01)
    assert percentile([3.0], 99) == 3.0
    stats = Percentiles.of_seconds([0.1, 0.2, 0.3])
    assert stats is not None and stats.p50 == pytest.approx(200) and stats.n == 3
    assert Percentiles.of_seconds([]) is None


def test_slo() -> None:
    fast = RequestResult(0, 0.0, e2e_s=1.0, ttft_s=0.1, tpot_s=0.01, output_tokens=10)
    slow_start = RequestResult(1, 0.0, e2e_s=1.0, ttft_s=0.9, tpot_s=0.01, output_tokens=10)
    slow_tokens = RequestResult(2, 0.0, e2e_s=1.0, ttft_s=0.1, tpot_s=0.05, output_tokens=10)
    failed = RequestResult(3, 0.0, error="timeout")
    slo = Slo(ttft_ms=500, tpot_ms=20)
    assert [slo.met(r) for r in (fast, slow_start, slow_tokens, failed)] == [
        True,
        False,
        False,
        False,
    ]
    assert Slo().met(slow_start)
    assert not Slo().met(failed)
