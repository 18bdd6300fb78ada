from __future__ import annotations

from collections.abc import Callable

from policies import Candidate, Hedge, Policy, Pricing, RequestFacts

Make = Callable[..., Candidate]
REQ = RequestFacts(prompt_tokens=100, max_tokens=10)


def test_rows_cover_ranked_then_dropped(make: Make) -> None:
    policy = Policy.parse(["healthy", "cheapest"])
    decision = policy.route(
        REQ,
        [
            make("down", healthy=False),
            make("b", pricing=Pricing(2, 2)),
            make("a", pricing=Pricing(1, 1)),
        ],
    )
    rows = [(r.position, r.candidate, r.step, r.verdict) for r in decision.rows()]
    assert rows == [
        (1, "a", "healthy", "pass"),
        (1, "a", "cheapest", "score"),
        (2, "b", "healthy", "pass"),
        (2, "b", "cheapest", "score"),
        (None, "down", "healthy", "drop"),
    ]
    text = decision.explain()
    assert text.splitlines()[0].split()[:4] == ["1", "a", "healthy", "pass"]
    assert " - down" in text


def test_reason_is_short_ascii(make: Make) -> None:
    long_name = "x" * 300
    decision = Policy.parse(["cheapest"]).route(REQ, [make(long_name)])
    reason = decision.reason()
    assert len(reason) == 200
    assert reason.endswith("...")
    assert reason.isascii()


def test_reason_mentions_drops_and_remarks(make: Make) -> None:
    decision = Policy.parse(["healthy", "first"]).route(REQ, [make("a", healthy=False), make("b")])
    assert decision.reason() == "b by first config order; 1 dropped"


def test_no_candidates(make: Make) -> None:
    decision = Policy.parse(["healthy"]).route(REQ, [])
    assert decision.chosen is None
    assert decision.reason() == "no candidate: no candidates configured"
    assert decision.explain() == "   note: no candidates configured"


def test_hedge_travels_with_decision(make: Make) -> None:
    policy = Policy.parse(["first", {"hedge": {"after_ms": 300}}])
    assert policy.route(REQ, [make("a"), make("b")]).hedge == Hedge(after_ms=300)


def test_route_is_pure(make: Make) -> None:
    policy = Policy.parse(["healthy", {"slo": {"ttft_ms": 500}}, "cheapest", "affinity"])
    cands = [
        make("a", pricing=Pricing(1, 1), ewma_ttft_ms=100.0),
        make("b", pricing=Pricing(1, 1), ewma_ttft_ms=700.0),
    ]
    first = policy.route(REQ, cands, now=5.0)
    assert policy.route(REQ, cands, now=5.0) == first
