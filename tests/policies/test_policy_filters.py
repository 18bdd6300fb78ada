from __future__ import annotations

from collections.abc import Callable

import pytest

from policies import Candidate, Capabilities, Policy, Pricing, RequestFacts

Make = Callable[..., Candidate]
REQ = RequestFacts(prompt_tokens=1000, max_tokens=200)


def test_healthy_drops_unhealthy_cooling_and_error_prone(make: Make) -> None:
    policy = Policy.parse([{"healthy": {"max_error_rate": 0.5}}])
    cands = [
        make("sick", healthy=False),
        make("cooling", cooled_down_until=110.0),
        make("cooled", cooled_down_until=90.0),
        make("flaky", error_rate=0.6),
        make("fine"),
    ]
    decision = policy.route(REQ, cands, now=100.0)
    assert decision.names == ["cooled", "fine"]
    reasons = {r.name: r.notes[-1].detail for r in decision.dropped}
    assert reasons == {
        "sick": "marked unhealthy",
        "cooling": "cooling down 10.0s more",
        "flaky": "error rate 60% > 50%",
    }
    assert decision.remarks == ()


def test_healthy_keeps_least_recently_failed_when_all_are_down(make: Make) -> None:
    cands = [
        make("a", healthy=False, last_failure_at=50.0),
        make("b", healthy=False, last_failure_at=20.0),
        make("c", cooled_down_until=200.0, last_failure_at=90.0),
    ]
    decision = Policy.parse(["healthy"]).route(REQ, cands, now=100.0)
    assert decision.names == ["b"]
    assert decision.chosen is not None
    assert decision.chosen.notes[-1].verdict == "rescued"
    assert decision.remarks == ("healthy: none passed, kept b",)
    assert "healthy: none passed, kept b" in decision.reason()
    assert [r.name for r in decision.dropped] == ["a", "c"]


def test_capable_features(make: Make) -> None:
    cands = [
        make("plain"),
        make("tools", capabilities=Capabilities(tools=True)),
        make("all", capabilities=Capabilities(tools=True, json_schema=True, images=True)),
    ]
    policy = Policy.parse(["capable"])
    assert policy.route(RequestFacts(10), cands).names == ["plain", "tools", "all"]
    assert policy.route(RequestFacts(10, needs_tools=True), cands).names == ["tools", "all"]
    needs = RequestFacts(10, needs_json_schema=True, has_images=True)
    decision = policy.route(needs, cands)
    assert decision.names == ["all"]
    assert decision.dropped[0].notes[-1].detail == "no json_schema, images"


def test_capable_content_parts(make: Make) -> None:
    cands = [
        make("remote", capabilities=Capabilities(images=True)),
        make("text", capabilities=Capabilities(content_parts=frozenset({"text"}))),
        make(
            "eyes",
            capabilities=Capabilities(images=True, content_parts=frozenset({"text", "image_url"})),
        ),
        make("ears", capabilities=Capabilities(content_parts=frozenset({"text", "input_audio"}))),
    ]
    policy = Policy.parse(["capable"])
    texts = RequestFacts(10, content_parts=frozenset({"text"}))
    assert policy.route(texts, cands).names == ["remote", "text", "eyes", "ears"]
    image = RequestFacts(10, has_images=True, content_parts=frozenset({"text", "image_url"}))
    assert policy.route(image, cands).names == ["remote", "eyes"]
    audio = RequestFacts(10, content_parts=frozenset({"input_audio", "file"}))
    decision = policy.route(audio, cands)
    assert decision.names == ["remote"]
    details = {r.name: r.notes[-1].detail for r in decision.dropped}
    assert details["ears"] == "no file parts"
    assert details["text"] == "no file parts, input_audio parts"


def test_capable_context_length_counts_prompt_plus_max_tokens(make: Make) -> None:
    cands = [
        make("short", capabilities=Capabilities(context_length=1100)),
        make("exact", capabilities=Capabilities(context_length=1200)),
        make("unknown"),
    ]
    decision = Policy.parse(["capable"]).route(REQ, cands)
    assert decision.names == ["exact", "unknown"]
    assert decision.dropped[0].notes[-1].detail == "needs 1200 tokens > context 1100"


def test_a_deployment_that_clamps_output_needs_room_for_the_prompt_only(make: Make) -> None:
    clamps = Capabilities(context_length=1100, clamps_output=True)
    cands = [
        make("short", capabilities=Capabilities(context_length=1100)),
        make("clamps", capabilities=clamps),
    ]
    assert Policy.parse(["capable"]).route(REQ, cands).names == ["clamps"]
    assert Policy.parse(["capable"]).route(RequestFacts(1100, max_tokens=5), cands).names == []


def test_capable_rejects_when_none_can_serve(make: Make) -> None:
    decision = Policy.parse(["capable", "first"]).route(
        RequestFacts(10, needs_tools=True), [make("a"), make("b")]
    )
    assert decision.chosen is None
    assert decision.names == []
    assert decision.remarks == ("capable: no candidate passes",)
    assert decision.reason() == "no candidate: capable: no candidate passes"


def test_fits_memory_default_allows_everything_that_loads(make: Make) -> None:
    cands = [
        make("fits", fit="fits"),
        make("spills", fit="kv_spills"),
        make("offload", fit="partial_offload"),
        make("nope", fit="does_not_fit"),
        make("api", backend="openai"),
    ]
    decision = Policy.parse(["fits_memory"]).route(REQ, cands)
    assert decision.names == ["fits", "spills", "offload", "api"]
    strict = Policy.parse([{"fits_memory": {"allow": ["fits"]}}]).route(REQ, cands)
    assert strict.names == ["fits", "api"]


def test_fits_memory_rejects_when_nothing_loads(make: Make) -> None:
    decision = Policy.parse(["fits_memory"]).route(REQ, [make("x", fit="does_not_fit")])
    assert decision.chosen is None
    assert decision.dropped[0].notes[0].detail == "does_not_fit"


def test_fits_memory_rejects_unknown_class() -> None:
    with pytest.raises(ValueError, match=r"fits_memory\): allow.0"):
        Policy.parse([{"fits_memory": {"allow": ["roomy"]}}])


def test_within_budget(make: Make) -> None:
    cands = [
        make("pricey", pricing=Pricing(input_per_1m=10, output_per_1m=30)),
        make("cheap", pricing=Pricing(input_per_1m=0.15, output_per_1m=0.6)),
        make("unpriced"),
    ]
    per_request = Policy.parse([{"within_budget": {"max_usd_per_request": 0.001}}])
    decision = per_request.route(REQ, cands)
    assert decision.names == ["cheap", "unpriced"]
    assert decision.dropped[0].notes[0].detail == "$0.016000 > $0.001000/request"
    per_1m = Policy.parse([{"within_budget": {"max_usd_per_1m_tokens": 1.0}}])
    assert per_1m.route(REQ, cands).names == ["cheap", "unpriced"]
    none_left = per_request.route(REQ, cands[:1])
    assert none_left.chosen is None
    assert none_left.remarks == ("within_budget: no candidate passes",)


def test_dropped_candidates_skip_later_steps(make: Make) -> None:
    decision = Policy.parse(["healthy", "capable", "cheapest"]).route(
        REQ, [make("down", healthy=False), make("up")]
    )
    down = decision.dropped[0]
    assert [n.step for n in down.notes] == ["healthy"]
    assert [n.step for n in decision.ranked[0].notes] == ["healthy", "capable", "cheapest"]
