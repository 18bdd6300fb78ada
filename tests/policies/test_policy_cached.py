"""``cached_prefix`` and prefix-aware predictions: TTFT counts only what the engine lacks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from policies import Candidate, Policy, RequestFacts, predict_ttft_ms, queue_wait_ms
from policies.prefix import cached_tokens, held_prefix, prompt_tokens_on, uncached_tokens

Make = Callable[..., Candidate]

# a conversation's chain: system prompt (1000 chars), first turn (to 1600), this turn (2000)
CHAIN = (("sys", 1000), ("turn1", 1600), ("turn2", 2000))
REQ = RequestFacts(prompt_tokens=500, max_tokens=10, prefix_chain=CHAIN)
FAST = {"prefill_tokens_per_s": 1000.0, "slots_total": 4, "slots_busy": 0}


def test_cached_tokens_are_the_engines_depth_of_the_longest_held_link(make: Make) -> None:
    cand = make("a", held_prefixes={"sys": 250, "turn1": 400}, **FAST)
    found = held_prefix(REQ, cand)
    assert found is not None and (found.link, found.chars, found.tokens) == (1, 1600, 400)
    assert cached_tokens(REQ, cand) == 400
    assert cached_tokens(REQ, make("b", held_prefixes={"other": 5}, **FAST)) == 0
    assert cached_tokens(RequestFacts(prompt_tokens=500), cand) == 0


def test_predicted_ttft_prefills_only_uncached_tokens(make: Make) -> None:
    cold = make("cold", **FAST)
    warm = make("warm", held_prefixes={"sys": 250, "turn1": 400}, **FAST)
    assert predict_ttft_ms(REQ, cold) == 500.0
    assert predict_ttft_ms(REQ, warm) == 100.0
    ranked = Policy.parse([{"fastest": {"by": "ttft"}}]).route(REQ, [cold, warm])
    assert ranked.names == ["warm", "cold"]


def test_a_full_engine_queue_never_drains_for_this_request(make: Make) -> None:
    full = make(
        "full", slots_total=1, slots_busy=1, queue_depth=2, queue_limit=2, ewma_service_ms=100.0
    )
    assert queue_wait_ms(REQ, full) == float("inf")
    room = make(
        "room", slots_total=1, slots_busy=1, queue_depth=1, queue_limit=2, ewma_service_ms=100.0
    )
    assert queue_wait_ms(REQ, room) == 200.0


def test_the_gateways_own_requests_there_count_as_busy_slots(make: Make) -> None:
    """An engine's report may be a poll old: requests sent since fill its slots."""
    stale = make("stale", slots_total=1, slots_busy=0, in_flight=1, ewma_service_ms=300.0)
    assert queue_wait_ms(REQ, stale) == 300.0
    assert queue_wait_ms(REQ, make("idle", slots_total=1, slots_busy=0)) == 0.0


def test_the_home_keeps_the_request_unless_its_wait_outweighs_the_move(make: Make) -> None:
    """Leaving costs re-prefilling what the home holds (beyond what the other holds) at the
    other's prefill rate: the home keeps a request predicted slower there by less."""
    slow = {**FAST, "prefill_tokens_per_s": 300.0}
    home = make("home", held_prefixes={"sys": 250, "turn1": 400}, **slow)
    other = make("other", held_prefixes={"sys": 250}, **FAST)
    # home: 100 tokens at 300/s = 333 ms; other: 250 at 1000/s = 250 ms, + 150 to move
    for margin in (0, 10, 250):
        policy = Policy.parse([{"cached_prefix": {"margin_ms": margin}}])
        decision = policy.route(REQ, [other, home])
        assert decision.names == ["home", "other"] and decision.remarks == ()
    assert decision.ranked[0].notes[0].detail == "holds ~400 tok ttft~333ms home"
    assert decision.ranked[1].notes[0].detail == "holds ~250 tok ttft~250ms"
    # a queue at home: 300 ms for a slot, longer than the move
    full = {**slow, "slots_busy": 4, "ewma_service_ms": 1200.0}
    queued = make("home", held_prefixes={"sys": 250, "turn1": 400}, **full)
    left = Policy.parse(["cached_prefix"]).route(REQ, [other, queued])
    assert left.names == ["other", "home"]
    assert left.remarks == (
        "cached_prefix: left home (holds ~400 tok, ttft~633ms) for other (ttft~250ms, move ~150ms)",
    )


def test_with_no_prefill_rate_the_margin_prices_the_move(make: Make) -> None:
    home = make("home", held_prefixes={"turn1": 400}, ewma_ttft_ms=400.0, slots_total=4)
    other = make("other", ewma_ttft_ms=100.0, slots_total=4, slots_busy=0)
    home = replace(home, live=replace(home.live, slots_busy=0))
    assert Policy.parse(["cached_prefix"]).route(REQ, [home, other]).names == ["other", "home"]
    sticky = Policy.parse([{"cached_prefix": {"margin_ms": 500}}])
    assert sticky.route(REQ, [home, other]).names == ["home", "other"]


def test_the_start_every_session_shares_does_not_pull_new_sessions(make: Make) -> None:
    """An engine holding the shared system prompt ranks for a new session as if it held
    none of it: otherwise the engine that served the first session gets every later one."""
    warm = make("warm", held_prefixes={"sys": 250}, **FAST)  # 250 ms, 500 ms without "sys"
    cold = make("cold", **FAST)  # 500 ms
    new_session = replace(REQ, prefix_shared=1)
    policy = Policy.parse(["cached_prefix"])
    assert policy.route(new_session, [cold, warm]).names == ["cold", "warm"]
    busier = make("warm", held_prefixes={"sys": 250}, **{**FAST, "slots_busy": 3})
    assert policy.route(new_session, [busier, cold]).names[0] == "warm"  # a tie: the order
    cold_queued = make("cold", **{**FAST, "slots_busy": 4, "ewma_service_ms": 400.0})
    assert policy.route(new_session, [cold_queued, warm]).names == ["warm", "cold"]


def test_holding_only_the_start_conversations_share_makes_no_home(make: Make) -> None:
    """Every agent session starts with the same tools and system prompt: an engine holding
    only those is not a new session's home, so new sessions spread by predicted TTFT."""
    warm = make("warm", held_prefixes={"sys": 250}, **{**FAST, "prefill_tokens_per_s": 400.0})
    cold = make("cold", **FAST)  # 500 ms to warm's 250 uncached at 400/s = 625 ms
    new_session = replace(REQ, prefix_shared=1)
    assert Policy.parse(["cached_prefix"]).route(new_session, [warm, cold]).names == [
        "cold",
        "warm",
    ]
    assert Policy.parse(["cached_prefix"]).route(REQ, [warm, cold]).names == ["warm", "cold"]


def test_a_saturated_home_is_left_for_an_idle_candidate(make: Make) -> None:
    busy = {"slots_total": 1, "slots_busy": 1, "queue_depth": 1, "ewma_service_ms": 2000.0}
    home = make("home", held_prefixes={"turn1": 400}, prefill_tokens_per_s=1000.0, **busy)
    idle = make("idle", **FAST)
    decision = Policy.parse(["cached_prefix"]).route(REQ, [home, idle])
    assert decision.names == ["idle", "home"]
    assert decision.remarks[0].startswith("cached_prefix: left home (holds ~400 tok, ttft~4100ms)")


def test_unmeasured_candidates_rank_by_free_slots(make: Make) -> None:
    """No figures yet: a free slot ranks as 0 ms (it gets measured), a queue with no rate
    to drain it after everyone measured."""
    stuck = make("stuck", slots_total=1, slots_busy=1, queue_depth=1)
    new = make("new", slots_total=2, slots_busy=0)
    slow = make("slow", slots_total=4, slots_busy=0, prefill_tokens_per_s=10.0)
    policy = Policy.parse(["cached_prefix"])
    assert policy.route(REQ, [stuck, slow, new]).names == ["new", "slow", "stuck"]
    # a burst to two unmeasured engines spreads: the one with a request in flight is second
    started = make("started", slots_total=2, slots_busy=0, in_flight=1)
    assert policy.route(REQ, [started, new]).names == ["new", "started"]


def test_equal_prefixes_go_where_the_session_hashes_to(make: Make) -> None:
    fleet = [make(name, held_prefixes={"sys": 250}, **FAST) for name in ("a", "b", "c")]
    policy = Policy.parse(["cached_prefix"])
    chosen = set()
    for session in [f"s{i}" for i in range(12)]:
        request = RequestFacts(prompt_tokens=500, prefix_chain=CHAIN, session_id=session)
        first = policy.route(request, fleet).names[0]
        assert policy.route(request, list(reversed(fleet))).names[0] == first  # stable
        chosen.add(first)
    assert chosen == {"a", "b", "c"}
    # without a session id equal prefixes leave the order to the predictions (a tie here)
    assert policy.route(REQ, fleet).names == ["a", "b", "c"]


def test_slo_spills_from_the_home_engine_with_a_reason(make: Make) -> None:
    busy = {"slots_total": 1, "slots_busy": 1, "queue_depth": 0, "ewma_service_ms": 3000.0}
    local = make("local", held_prefixes={"turn1": 400}, prefill_tokens_per_s=1000.0, **busy)
    api = make("api", backend="openai", ewma_ttft_ms=400.0)
    policy = Policy.parse(["healthy", {"slo": {"ttft_ms": 1500}}, "cached_prefix"])
    decision = policy.route(REQ, [local, api])
    assert decision.names == ["api", "local"]
    spill = "spill: predicted ttft 3100 ms > slo 1500 ms on local"
    assert decision.remarks[0] == spill
    assert spill in decision.reason()
    fast = policy.route(REQ, [local, api], explain=False)
    assert fast.names == decision.names and fast.reason() == decision.reason()
    # idle, the same engine keeps it, and nothing spills
    idle = make("local", held_prefixes={"turn1": 400}, **FAST)
    kept = policy.route(REQ, [idle, api])
    assert kept.names == ["local", "api"] and kept.remarks == ()


def test_engines_come_before_apis_unless_an_earlier_step_put_an_api_ahead(make: Make) -> None:
    engine = make("local", held_prefixes={"sys": 250}, **FAST)  # ttft 250 ms
    api = make("api", backend="openai", ewma_ttft_ms=50.0)
    new_session = replace(REQ, prefix_shared=1)  # no home: the faster comes first
    policy = Policy.parse([{"slo": {"ttft_ms": 1500}}, "cached_prefix"])
    assert policy.route(new_session, [api, engine]).names == ["local", "api"]
    fastest = Policy.parse(
        [{"slo": {"ttft_ms": 1500}}, {"cached_prefix": {"engines_first": False}}]
    )
    assert fastest.route(new_session, [api, engine]).names == ["api", "local"]
    full = make("local", slots_total=1, slots_busy=1, queue_depth=2, queue_limit=2)
    assert Policy.parse(["cached_prefix"]).route(REQ, [full, api]).names == ["api", "local"]


def test_the_policy_names_its_steps() -> None:
    policy = Policy.parse([{"slo": {"ttft_ms": 1500}}, {"cached_prefix": {"margin_ms": 100}}])
    assert policy.describe() == "slo(ttft_ms=1500.0) > cached_prefix(margin_ms=100)"
    off = Policy.parse([{"cached_prefix": {"engines_first": False}}])
    assert off.describe() == "cached_prefix(margin_ms=250,engines_first=False)"


# an engine whose tokens are 4/3 characters: 0.75 tokens a character, 1500 for the prompt
DENSE = {"sys": 750, "turn1": 1200}


def test_the_prompt_is_counted_in_the_engines_tokens(make: Make) -> None:
    """The holder's depth over its characters sizes the prompt there; a candidate holding
    nothing uses its calibrated ratio, and without one the request's own estimate."""
    home = make("home", held_prefixes=DENSE, **FAST)
    assert prompt_tokens_on(REQ, home, held_prefix(REQ, home)) == 1500
    assert (cached_tokens(REQ, home), uncached_tokens(REQ, home)) == (1200, 300)
    assert predict_ttft_ms(REQ, home) == 300.0
    calibrated = make("calibrated", tokens_per_char=0.75, **FAST)
    assert uncached_tokens(REQ, calibrated) == 1500
    assert predict_ttft_ms(REQ, calibrated) == 1500.0
    assert uncached_tokens(REQ, make("unknown", **FAST)) == 500
    assert uncached_tokens(RequestFacts(prompt_tokens=7), calibrated) == 7  # no chain


def test_a_calibrated_ratio_keeps_the_conversation_home(make: Make) -> None:
    """Counted by the gateway's estimate, an empty engine looks three times cheaper than it
    is and takes the conversation from its cache; counted in the engine's tokens, not."""
    home = make("home", held_prefixes=DENSE, **{**FAST, "prefill_tokens_per_s": 300.0})
    policy = Policy.parse(["cached_prefix"])
    guessed = make("other", **FAST)  # 500 estimated tokens: 500 ms to home's 1000 ms
    assert predict_ttft_ms(REQ, guessed) == 500.0 and predict_ttft_ms(REQ, home) == 1000.0
    measured = make("other", tokens_per_char=0.75, **FAST)  # 1500 tokens: 1500 ms
    decision = policy.route(REQ, [home, measured])
    assert decision.names == ["home", "other"]
    assert decision.ranked[0].notes[0].detail == "holds ~1200 tok ttft~1000ms home"
    fast = policy.route(REQ, [home, measured], explain=False)
    assert fast.names == decision.names and fast.reason() == decision.reason()
