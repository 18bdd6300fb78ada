"""The size steps: ``smallest``, ``largest`` and ``size: {min_b, max_b}``."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from policies import Candidate, Policy, Pricing, RequestFacts

Make = Callable[..., Candidate]
REQ = RequestFacts(prompt_tokens=100, max_tokens=50)


def test_smallest_and_largest_order_by_params_b(make: Make) -> None:
    pool = [make("mid", params_b=8.0), make("big", params_b=70.0), make("tiny", params_b=0.135)]
    assert Policy.parse(["smallest"]).route(REQ, pool).names == ["tiny", "mid", "big"]
    assert Policy.parse(["largest"]).route(REQ, pool).names == ["big", "mid", "tiny"]
    detail = Policy.parse(["smallest"]).route(REQ, pool).ranked[0].notes[0].detail
    assert detail == "0.135B"


def test_unknown_size_ranks_after_every_known_one_and_the_route_says_so(make: Make) -> None:
    pool = [make("api"), make("big", params_b=70.0), make("tiny", params_b=0.5)]
    for ranker, order in (
        ("smallest", ["tiny", "big", "api"]),
        ("largest", ["big", "tiny", "api"]),
    ):
        decision = Policy.parse([ranker]).route(REQ, pool)
        assert decision.names == order
        assert decision.ranked[-1].notes[0].detail == "size unknown (ranks after known sizes)"
        assert f"{ranker}: size unknown for api, ranked last" in decision.remarks
        assert "size unknown for api" in decision.explain()


def test_mixture_of_experts_shows_its_active_parameters(make: Make) -> None:
    moe = make("moe", params_b=46.7, active_params_b=12.9)
    decision = Policy.parse(["largest"]).route(REQ, [moe])
    assert decision.ranked[0].notes[0].detail == "46.7B (12.9B active)"


def test_size_filter_keeps_the_bounds_and_lets_unknown_sizes_pass(make: Make) -> None:
    pool = [
        make("tiny", params_b=0.135),
        make("mid", params_b=8.0),
        make("big", params_b=405.0),
        make("api"),
    ]
    decision = Policy.parse([{"size": {"min_b": 1, "max_b": 100}}, "first"]).route(REQ, pool)
    assert decision.names == ["mid", "api"]
    dropped = {r.name: r.notes[0].detail for r in decision.dropped}
    assert dropped == {"tiny": "0.135B < 1B", "big": "405B > 100B"}
    assert Policy.parse([{"size": {"max_b": 1}}]).route(REQ, pool).names == ["tiny", "api"]


@pytest.mark.parametrize(
    ("args", "message"),
    [({}, "set min_b or max_b"), ({"min_b": 9, "max_b": 2}, "min_b is above max_b")],
)
def test_size_filter_rejects_empty_or_inverted_bounds(args: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Policy.parse([{"size": args}])


def test_size_steps_compose_with_the_others(make: Make) -> None:
    # the smallest healthy one that fits; an open breaker and a model that does not fit are
    # filtered out before size ranks, and price breaks no tie that size decided
    pool = [
        make("tiny", params_b=0.135, healthy=False, cooled_down_until=1e12),
        make("small", params_b=1.5, fit="does_not_fit"),
        make("mid", params_b=8.0, pricing=Pricing(input_per_1m=5, output_per_1m=5)),
        make("big", params_b=70.0, pricing=Pricing(input_per_1m=0.1, output_per_1m=0.1)),
    ]
    policy = Policy.parse(["healthy", "capable", "fits_memory", "smallest", "cheapest"])
    decision = policy.route(REQ, pool, now=0.0)
    assert decision.names == ["mid", "big"]
    assert policy.describe() == "healthy > capable > fits_memory > smallest > cheapest"
    sized = Policy.parse([{"size": {"max_b": 10}}, "largest"]).describe()
    assert sized == "size(max_b=10) > largest"
