from __future__ import annotations

from collections.abc import Callable

from policies import Candidate, Policy, Pricing, RequestFacts

Make = Callable[..., Candidate]
REQ = RequestFacts(prompt_tokens=1000, max_tokens=100)
SLO = {"slo": {"ttft_ms": 500, "tpot_ms": 50}}


def _fleet(make: Make) -> list[Candidate]:
    return [
        # cheap but its queue makes it miss TTFT: 2 x 4000 / 2 + 500 ms prefill
        make(
            "cpp",
            pricing=Pricing(input_per_1m=0.01, output_per_1m=0.01),
            slots_busy=2,
            slots_total=2,
            queue_depth=1,
            ewma_service_ms=4000.0,
            prefill_tokens_per_s=2000.0,
            ewma_itl_ms=30.0,
        ),
        make(
            "vllm",
            pricing=Pricing(input_per_1m=0.05, output_per_1m=0.1),
            slots_busy=1,
            slots_total=8,
            prefill_tokens_per_s=8000.0,
            ewma_itl_ms=25.0,
        ),
        make(
            "api",
            pricing=Pricing(input_per_1m=0.15, output_per_1m=0.6),
            ewma_ttft_ms=350.0,
            ewma_itl_ms=12.0,
        ),
        make("new", pricing=Pricing(input_per_1m=0.0, output_per_1m=0.0)),
    ]


def test_demote_puts_meeting_then_unknown_then_missers(make: Make) -> None:
    decision = Policy.parse([SLO, "cheapest"]).route(REQ, _fleet(make))
    assert decision.names == ["vllm", "api", "new", "cpp"]
    notes = {r.name: r.notes[0].detail for r in decision.ranked}
    assert notes["vllm"] == "ok ttft~125/500ms tpot~25/50ms"
    assert notes["new"] == "unknown ttft~?/500ms tpot~?/50ms"
    assert notes["cpp"] == "miss ttft~4500/500ms tpot~30/50ms"
    # the first configured candidate misses the TTFT target: the request spills past it
    assert decision.remarks == ("spill: predicted ttft 4500 ms > slo 500 ms on cpp",)
    assert decision.reason().startswith("vllm by slo ok ttft~125/500ms tpot~25/50ms, cheapest $")


def test_drop_removes_missers_but_keeps_unknown(make: Make) -> None:
    policy = Policy.parse([{"slo": {"ttft_ms": 500, "tpot_ms": 50, "mode": "drop"}}, "cheapest"])
    decision = policy.route(REQ, _fleet(make))
    assert decision.names == ["vllm", "api", "new"]
    assert [(r.name, r.notes[-1].verdict) for r in decision.dropped] == [("cpp", "drop")]


def test_tpot_only_target(make: Make) -> None:
    decision = Policy.parse([{"slo": {"tpot_ms": 20}}, "first"]).route(REQ, _fleet(make))
    assert decision.names == ["api", "new", "vllm", "cpp"]


def test_none_meets_least_bad_first_and_said_so(make: Make) -> None:
    slow = make("slow", ewma_ttft_ms=3000.0, ewma_itl_ms=10.0)  # badness 6
    slower = make("slower", ewma_ttft_ms=1000.0, ewma_itl_ms=400.0)  # badness 8
    demote = Policy.parse([SLO, "cheapest"]).route(REQ, [slower, slow])
    assert demote.names == ["slow", "slower"]
    assert demote.remarks == ("slo: none predicted to meet, least-bad slow",)
    assert "none predicted to meet" in demote.reason()
    drop = Policy.parse([{"slo": {"ttft_ms": 500, "tpot_ms": 50, "mode": "drop"}}])
    decision = drop.route(REQ, [slower, slow])
    assert decision.names == ["slow"]
    assert decision.ranked[0].notes[-1].verdict == "rescued"
    assert decision.ranked[0].notes[-1].detail.startswith("least-bad: miss")


def test_slo_moves_traffic_when_a_deployment_slows(make: Make) -> None:
    policy = Policy.parse(["healthy", SLO, "cheapest"])
    api = make("api", pricing=Pricing(1.0, 1.0), ewma_ttft_ms=300.0, ewma_itl_ms=15.0)

    def local(itl: float) -> Candidate:
        return make("local", pricing=Pricing(0.1, 0.1), ewma_ttft_ms=200.0, ewma_itl_ms=itl)

    assert policy.route(REQ, [local(20.0), api]).names[0] == "local"
    assert policy.route(REQ, [local(80.0), api]).names[0] == "api"
