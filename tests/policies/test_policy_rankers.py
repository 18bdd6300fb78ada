from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable

import pytest

from policies import Candidate, Policy, Pricing, RequestFacts
from policies.rankers import rendezvous_unit

Make = Callable[..., Candidate]
REQ = RequestFacts(prompt_tokens=1000, max_tokens=200)


def test_cheapest_prices_api_per_token_and_local_per_hour(make: Make) -> None:
    api = make("api", pricing=Pricing(input_per_1m=0.15, output_per_1m=0.60))
    # $0.36/h at 2000 prefill tok/s and 100 decode tok/s:
    # input 0.36/3600/2000 = 5e-8 $/tok, output 0.36/3600/100 = 1e-6 $/tok.
    local = make(
        "local",
        pricing=Pricing(usd_per_hour=0.36),
        prefill_tokens_per_s=2000.0,
        decode_tokens_per_s=100.0,
    )
    unmeasured = make("unmeasured", pricing=Pricing(usd_per_hour=0.1))
    decision = Policy.parse(["cheapest"]).route(REQ, [unmeasured, local, api])
    assert decision.names == ["local", "api", "unmeasured"]
    scores = {r.name: r.notes[0].score for r in decision.ranked}
    assert scores["api"] == pytest.approx(1000 * 0.15e-6 + 200 * 0.60e-6)
    assert scores["local"] == pytest.approx(1000 * 5e-8 + 200 * 1e-6)
    assert scores["unmeasured"] == math.inf
    assert decision.ranked[2].notes[0].detail == "cost unknown"


def test_explicit_price_wins_over_hourly(make: Make) -> None:
    cand = make(
        "local",
        pricing=Pricing(input_per_1m=0.0, output_per_1m=0.0, usd_per_hour=5.0),
        prefill_tokens_per_s=10.0,
        decode_tokens_per_s=1.0,
    )
    decision = Policy.parse(["cheapest"]).route(REQ, [cand])
    assert decision.ranked[0].notes[0].score == 0.0


def test_fastest_orders_by_predicted_latency(make: Make) -> None:
    slow = make("slow", ewma_ttft_ms=900.0, ewma_itl_ms=10.0)
    fast_start = make("fast_start", ewma_ttft_ms=100.0, ewma_itl_ms=40.0)
    blind = make("blind")
    by_total = Policy.parse(["fastest"]).route(REQ, [blind, fast_start, slow])
    # totals: slow 900 + 199*10 = 2890; fast_start 100 + 199*40 = 8060
    assert by_total.names == ["slow", "fast_start", "blind"]
    assert by_total.ranked[0].notes[0].detail == "total~2890ms"
    assert by_total.ranked[2].notes[0].detail == "total unknown"
    by_ttft = Policy.parse([{"fastest": {"by": "ttft"}}]).route(REQ, [blind, fast_start, slow])
    assert by_ttft.names == ["fast_start", "slow", "blind"]
    by_tpot = Policy.parse([{"fastest": {"by": "tpot"}}]).route(REQ, [slow, fast_start])
    assert by_tpot.names == ["slow", "fast_start"]


def test_least_loaded_normalises_by_slots_or_concurrency(make: Make) -> None:
    vllm = make("vllm", in_flight=8, slots_total=16, slots_busy=8)  # 0.5
    cpp = make("cpp", in_flight=1, queue_depth=1, slots_total=4, slots_busy=1)  # 0.5
    api = make("api", backend="openai", in_flight=10, max_concurrency=40)  # 0.25
    raw = make("raw", in_flight=1)  # 1.0
    decision = Policy.parse(["least_loaded"]).route(REQ, [raw, vllm, cpp, api])
    assert decision.names == ["api", "vllm", "cpp", "raw"]
    assert decision.ranked[0].notes[0].detail == "10/40=0.25"


def test_first_keeps_config_order(make: Make) -> None:
    decision = Policy.parse(["first"]).route(REQ, [make("b"), make("a"), make("c")])
    assert decision.names == ["b", "a", "c"]


def test_rankers_compose_like_order_by(make: Make) -> None:
    free_a = make("free_a", pricing=Pricing(0, 0), in_flight=5, max_concurrency=10)
    free_b = make("free_b", pricing=Pricing(0, 0), in_flight=1, max_concurrency=10)
    paid = make("paid", pricing=Pricing(1, 1), in_flight=0, max_concurrency=10)
    decision = Policy.parse(["cheapest", "least_loaded"]).route(REQ, [free_a, paid, free_b])
    assert decision.names == ["free_b", "free_a", "paid"]


def test_weighted_shares_follow_weights_deterministically(make: Make) -> None:
    cands = [make("big", weight=3.0), make("small", weight=1.0), make("off", weight=0.0)]
    policy = Policy.parse(["weighted"])
    firsts = Counter(
        policy.route(RequestFacts(10, request_id=f"req-{i}"), cands).names[0] for i in range(4000)
    )
    assert firsts["off"] == 0
    assert firsts["big"] / 4000 == pytest.approx(0.75, abs=0.03)
    again = policy.route(RequestFacts(10, request_id="req-7"), cands).names
    assert again == policy.route(RequestFacts(10, request_id="req-7"), cands).names
    assert policy.route(RequestFacts(10), cands).names == ["big", "small", "off"]


def test_affinity_same_key_same_candidate(make: Make) -> None:
    cands = [make(f"d{i}") for i in range(5)]
    policy = Policy.parse(["affinity"])
    for key in ("session-1", "session-2", "prefix:abc"):
        picks = {policy.route(RequestFacts(10, prefix_key=key), cands).names[0] for _ in range(3)}
        assert len(picks) == 1
    keyless = policy.route(RequestFacts(10), cands)
    assert keyless.names == [c.name for c in cands]
    assert keyless.ranked[0].notes[0].detail == "no key"


def test_affinity_keys_on_the_session_before_the_prefix(make: Make) -> None:
    """Sessions that share a system prompt (one prefix key) spread by their session."""
    cands = [make(f"d{i}") for i in range(4)]
    policy = Policy.parse(["affinity"])
    picks = {
        session: policy.route(RequestFacts(10, prefix_key="system", session_id=session), cands)
        for session in (f"s{i}" for i in range(40))
    }
    assert len({decision.names[0] for decision in picks.values()}) == 4
    again = policy.route(RequestFacts(10, prefix_key="other", session_id="s7"), cands)
    assert again.names[0] == picks["s7"].names[0]


def test_affinity_is_stable_when_candidates_come_and_go(make: Make) -> None:
    cands = [make(f"d{i}") for i in range(5)]
    policy = Policy.parse(["affinity"])
    keys = [f"user-{i}" for i in range(300)]
    before = {k: policy.route(RequestFacts(10, prefix_key=k), cands).names[0] for k in keys}
    assert len(set(before.values())) == 5
    fewer = [c for c in cands if c.name != "d2"]
    after = {k: policy.route(RequestFacts(10, prefix_key=k), fewer).names[0] for k in keys}
    moved = [k for k in keys if before[k] != after[k]]
    assert moved == [k for k in keys if before[k] == "d2"]
    more = [*cands, make("d5")]
    grown = {k: policy.route(RequestFacts(10, prefix_key=k), more).names[0] for k in keys}
    assert all(grown[k] in (before[k], "d5") for k in keys)
    assert 20 < sum(grown[k] == "d5" for k in keys) < 90


def test_rendezvous_unit_in_open_interval() -> None:
    values = [rendezvous_unit(str(i), "x") for i in range(1000)]
    assert all(0.0 < v < 1.0 for v in values)
    assert rendezvous_unit("k", "a") == rendezvous_unit("k", "a")
