"""The fast path (``explain=False``) decides exactly as the full path, over random fleets,
live figures, requests and policies drawn from the whole step vocabulary."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies import (
    FIT_CLASSES,
    Candidate,
    CandidateFacts,
    Capabilities,
    Decision,
    LiveFigures,
    Policy,
    Pool,
    Pricing,
    RequestFacts,
    builtin_primitives,
)

NOW = 1000.0

maybe_ms = st.none() | st.floats(1, 5000)
maybe_rate = st.none() | st.floats(1, 20000)

live_figures = st.builds(
    LiveFigures,
    ewma_ttft_ms=maybe_ms,
    ewma_itl_ms=st.none() | st.floats(1, 200),
    ewma_service_ms=maybe_ms,
    departures_per_s=st.none() | st.floats(0.1, 50),
    error_rate=st.floats(0, 1),
    in_flight=st.integers(0, 20),
    queue_depth=st.integers(0, 20),
    slots_busy=st.none() | st.integers(0, 8),
    slots_total=st.none() | st.integers(1, 8),
    prefill_tokens_per_s=maybe_rate,
    decode_tokens_per_s=maybe_rate,
    prefill_backlog_tokens=st.integers(0, 5000),
    queue_limit=st.none() | st.integers(1, 20),
    held_prefixes=st.sampled_from([{}, {"h1": 100}, {"h1": 100, "h2": 300}, {"h3": 900}]),
    tokens_per_char=st.none() | st.floats(0.05, 4.0),
) | st.just(LiveFigures())

pricing = st.one_of(
    st.just(Pricing()),
    st.builds(Pricing, input_per_1m=st.floats(0, 30), output_per_1m=st.floats(0, 60)),
    st.builds(Pricing, usd_per_hour=st.floats(0.1, 10)),
    # a few exact ties, so that the config order has to break them
    st.sampled_from([Pricing(1, 2), Pricing(3, 3)]),
)

params = st.none() | st.sampled_from([0.135, 1.0, 7.0, 8.0, 70.0]) | st.floats(0.1, 500)


part_kinds = st.sampled_from(["text", "image_url", "input_audio"])


@st.composite
def facts(draw: st.DrawFn, index: int, all_open: bool) -> CandidateFacts:
    open_ = all_open or draw(st.integers(0, 9)) == 0
    cooled = draw(st.none() | st.floats(NOW - 30, NOW + 30)) if open_ else None
    return CandidateFacts(
        name=f"d{index}",
        backend=draw(st.sampled_from(["openai", "vllm", "llamacpp"])),
        capabilities=Capabilities(
            tools=draw(st.booleans()),
            json_schema=draw(st.booleans()),
            images=draw(st.booleans()),
            content_parts=draw(st.none() | st.frozensets(part_kinds)),
            context_length=draw(st.none() | st.integers(256, 16384)),
            context_learned=draw(st.booleans()),
        ),
        pricing=draw(pricing),
        fit=draw(st.none() | st.sampled_from(FIT_CLASSES)),
        healthy=not open_ or (draw(st.booleans()) and not all_open),
        cooled_down_until=cooled,
        last_failure_at=draw(st.none() | st.floats(0, NOW)),
        weight=draw(st.sampled_from([0.0, 1.0, 2.0]) | st.floats(0, 5)),
        max_concurrency=draw(st.none() | st.integers(1, 16)),
        base_ttft_ms=draw(st.sampled_from([0.0, 50.0])),
        params_b=draw(params),
    )


@st.composite
def fleets(draw: st.DrawFn) -> list[Candidate]:
    size = draw(st.integers(1, 300) | st.integers(1, 4))
    all_open = draw(st.integers(0, 7)) == 0
    return [Candidate(draw(facts(i, all_open)), draw(live_figures)) for i in range(size)]


requests = st.builds(
    RequestFacts,
    prompt_tokens=st.integers(0, 20000),
    max_tokens=st.none() | st.integers(0, 4096),
    needs_tools=st.booleans(),
    needs_json_schema=st.booleans(),
    has_images=st.booleans(),
    content_parts=st.frozensets(part_kinds),
    prefix_key=st.none() | st.sampled_from(["a", "session-7"]),
    stream=st.booleans(),
    request_id=st.sampled_from(["", "req-1", "req-2"]),
    prefix_chain=st.sampled_from([(), (("h1", 100), ("h2", 300), ("h3", 500))]),
    prefix_shared=st.integers(0, 2),
    session_id=st.none() | st.sampled_from(["s1", "s2"]),
)

STEP_ARGS: dict[str, st.SearchStrategy[Any]] = {
    "healthy": st.none() | st.builds(dict, max_error_rate=st.floats(0, 1)),
    "fits_memory": st.none()
    | st.lists(st.sampled_from(FIT_CLASSES), min_size=1, unique=True).map(
        lambda allow: {"allow": allow}
    ),
    "within_budget": st.one_of(
        st.builds(dict, max_usd_per_request=st.floats(0, 0.05)),
        st.builds(dict, max_usd_per_1m_tokens=st.floats(0, 40)),
    ),
    "size": st.one_of(
        st.builds(dict, min_b=st.floats(0, 10)),
        st.builds(dict, max_b=st.floats(1, 100)),
        st.builds(dict, min_b=st.just(1.0), max_b=st.just(70.0)),
    ),
    "slo": st.one_of(
        st.builds(dict, ttft_ms=st.floats(10, 3000), mode=st.sampled_from(["demote", "drop"])),
        st.builds(dict, tpot_ms=st.floats(5, 100), mode=st.sampled_from(["demote", "drop"])),
        st.builds(dict, ttft_ms=st.floats(10, 3000), tpot_ms=st.floats(5, 100)),
    ),
    "fastest": st.none() | st.builds(dict, by=st.sampled_from(["ttft", "tpot", "total"])),
    "cached_prefix": st.none() | st.builds(dict, margin_ms=st.floats(0, 1000)),
}


@st.composite
def step_items(draw: st.DrawFn) -> object:
    name = draw(st.sampled_from(sorted(builtin_primitives())))
    args = draw(STEP_ARGS.get(name, st.none()))
    return name if args is None else {name: args}


@st.composite
def policies(draw: st.DrawFn) -> Policy:
    items: list[object] = draw(st.lists(step_items(), min_size=1, max_size=6))
    if draw(st.booleans()):
        items.append({"hedge": {"after_ms": 300}})
    return Policy.parse(items)


def assert_same(full: Decision, fast: Decision) -> None:
    assert fast.names == full.names
    assert [r.name for r in fast.dropped] == [r.name for r in full.dropped]
    assert fast.remarks == full.remarks
    assert fast.reason() == full.reason()
    assert fast.hedge == full.hedge
    for mine, theirs in zip(fast.ranked[:2], full.ranked[:2], strict=False):
        assert mine.notes == theirs.notes
    # the fast order is built as it is read: one by one, from the end, and in slices (the
    # dispatcher's "the rest" after each try) it reads as the full one
    assert [r.name for r in fast.ranked] == full.names
    assert [fast.ranked[-i].name for i in range(1, len(full.ranked) + 1)] == full.names[::-1]
    for cut in range(len(full.ranked) + 1):
        assert [r.name for r in fast.ranked[cut:]] == full.names[cut:]
        assert [r.name for r in fast.ranked[cut:][1:]] == full.names[cut + 1 :]
    assert [r.name for r in fast.ranked[::2]] == full.names[::2]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy=policies(), fleet=fleets(), request=requests)
def test_fast_decision_equals_full(policy: Policy, fleet: list[Candidate], request: Any) -> None:
    full = policy.route(request, fleet, now=NOW)
    fast = policy.route(request, fleet, now=NOW, explain=False)
    assert_same(full, fast)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    policy=policies(),
    fleet=fleets(),
    asked=st.lists(requests, min_size=2, max_size=3),
    changes=st.lists(st.tuples(st.integers(0, 299), st.sampled_from(["live", "down", "caps"]))),
)
def test_fast_decision_over_a_held_pool_equals_full(
    policy: Policy, fleet: list[Candidate], asked: list[RequestFacts], changes: Any
) -> None:
    """Over a pool kept between requests (its filters' kinds worked out by the first) and
    renewed as deployments change (live figures only, or their facts), every decision
    is the full path's over the fleet as it is then."""
    pool = Pool(fleet)
    for request in asked:
        assert_same(
            policy.route(request, fleet, now=NOW),
            policy.route(request, pool, now=NOW, explain=False),
        )
        for at, change in changes:
            fleet[at % len(fleet)] = changed(fleet[at % len(fleet)], change)
        pool = pool.renewed(list(fleet))


def changed(cand: Candidate, change: str) -> Candidate:
    """``cand`` measured anew, its breaker opened, or its context halved."""
    facts = cand.facts
    if change == "live":
        return Candidate(facts, LiveFigures(in_flight=cand.live.in_flight + 1, error_rate=0.9))
    if change == "down":
        return Candidate(replace(facts, healthy=False, cooled_down_until=NOW + 5), cand.live)
    caps = replace(
        facts.capabilities, context_length=(facts.capabilities.context_length or 8192) // 2
    )
    return Candidate(replace(facts, capabilities=caps), cand.live)


def backend_of(cand: Candidate) -> str:
    return cand.facts.backend


def test_a_pool_is_renewed_only_as_far_as_its_candidates_changed() -> None:
    """The same candidates give the same pool; new live figures a new pool that keeps the
    kinds already worked out; new facts a pool whose kinds are worked out anew."""
    fleet = [Candidate(CandidateFacts(name=f"d{i}", backend="openai")) for i in range(3)]
    pool = Pool(fleet)
    kinds = pool.kinds(backend_of)
    assert kinds.of == (0, 0, 0) and kinds.samples == (fleet[0],)
    assert pool.renewed(list(fleet)) is pool
    measured = pool.renewed([Candidate(c.facts, LiveFigures(in_flight=1)) for c in fleet])
    assert measured is not pool and measured[0].live.in_flight == 1
    assert measured.kinds(backend_of) is kinds
    moved = [*fleet[:2], Candidate(replace(fleet[2].facts, backend="vllm"))]
    renewed = pool.renewed(moved)
    assert list(renewed) == moved
    assert renewed.kinds(backend_of).of == (0, 0, 1)


def test_fast_decision_with_a_thousand_deployments() -> None:
    """The default and a five-step policy over 1,000 deployments, some down, some unable."""
    fleet = [
        Candidate(
            CandidateFacts(
                name=f"d{i}",
                backend="openai",
                capabilities=Capabilities(tools=i % 3 != 0, context_length=4096 + i),
                pricing=Pricing(1 + i % 7, 2 + i % 5),
                healthy=i % 11 != 0,
                cooled_down_until=None if i % 11 else NOW + 5,
            ),
            LiveFigures(ewma_ttft_ms=None if i % 4 == 0 else 100.0 + i),
        )
        for i in range(1000)
    ]
    request = RequestFacts(prompt_tokens=3000, max_tokens=1200, needs_tools=True)
    for raw in (
        None,
        ["healthy", "capable", "fits_memory", {"slo": {"ttft_ms": 5000}}, "cheapest"],
    ):
        policy = Policy.parse(raw)
        full = policy.route(request, fleet, now=NOW)
        fast = policy.route(request, fleet, now=NOW, explain=False)
        assert_same(full, fast)
        assert fast.chosen is not None and len(fast.dropped) > 300
        assert fast.ranked[2].notes == ()  # the rest carry none: that is the saving


def test_fast_path_declines_where_notes_of_the_dropped_are_read() -> None:
    """One survivor and others dropped: the full decision (telemetry reads the drops)."""
    fleet = [
        Candidate(CandidateFacts(name="up", backend="vllm")),
        Candidate(CandidateFacts(name="down", backend="vllm", healthy=False)),
    ]
    fast = Policy.default().route(RequestFacts(prompt_tokens=1), fleet, explain=False)
    assert [n.verdict for n in fast.dropped[0].notes] == ["drop"]


def test_a_step_that_replaces_apply_alone_is_run_on_the_full_path() -> None:
    """A custom ranker with its own ``apply`` (and no fast form) is honoured."""
    from policies.steps import Entry, RankStep, RouteContext, Score, StepOutcome

    class Reverse(RankStep):
        name = "reverse"

        def score(self, ctx: RouteContext, cand: Candidate) -> Score:
            return Score(0.0, "tie")

        def apply(self, ctx: RouteContext, entries: list[Entry]) -> StepOutcome:
            outcome = super().apply(ctx, entries)
            for place, entry in enumerate(entries):
                entry.keys[-1] = -place
            return outcome

    policy = Policy((Reverse(),))
    fleet = [Candidate(CandidateFacts(name=n, backend="vllm")) for n in "abc"]
    fast = policy.route(RequestFacts(prompt_tokens=1), fleet, explain=False)
    assert fast.names == ["c", "b", "a"]
