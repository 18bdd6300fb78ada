"""The default policy follows the candidates: interchangeable engines place by prefix,
anything else keeps the configured order."""

from __future__ import annotations

from collections.abc import Callable

from policies import Candidate, Policy, RequestFacts
from policies.defaults import Sameness, default_policy

Make = Callable[..., Candidate]

W1, W2 = Sameness("w1", "qwen", "openai"), Sameness("w2", "qwen", "openai")


def _steps(policy: Policy) -> list[str]:
    return [step.name for step in policy.steps]


def test_interchangeable_engines_get_prefix_placement() -> None:
    policy = default_policy([W1, W2])
    assert _steps(policy) == ["healthy", "capable", "fits_memory", "cached_prefix"]
    assert policy.default_note == "cached_prefix: 2 interchangeable openai engines"


def test_a_latency_target_puts_the_slo_spill_before_placement() -> None:
    policy = default_policy([W1, W2], ttft_ms=800)
    assert _steps(policy) == ["healthy", "capable", "fits_memory", "slo", "cached_prefix"]
    assert "slo(ttft_ms=800.0)" in policy.describe()


def test_candidates_that_differ_keep_the_configured_order() -> None:
    local = Sameness("local", "llama.gguf", "llamacpp")
    api = Sameness("api", "gpt-4o-mini", "openai", sees_cache=False)
    cases = {
        (local, api): "first: local, api differ in model",
        (W1, Sameness("x", "qwen", "vllm")): "first: w1, x differ in kind",
        (W1, Sameness("x", "qwen", "openai", price="dear")): "first: w1, x differ in price",
        (W1, Sameness("x", "qwen", "openai", sees_cache=False)): "first: no cache report from x",
    }
    for cands, note in cases.items():
        policy = default_policy(cands, ttft_ms=500)
        assert _steps(policy) == ["healthy", "capable", "fits_memory", "first"], note
        assert policy.default_note == note


def test_one_api_after_interchangeable_engines_stays_their_fallback(make: Make) -> None:
    api = Sameness("api", "gpt-4o-mini", "openai", sees_cache=False)
    policy = default_policy([W1, W2, api], ttft_ms=2000)
    assert _steps(policy) == ["healthy", "capable", "fits_memory", "slo", "cached_prefix"]
    assert policy.default_note == "cached_prefix: 2 interchangeable openai engines, then api"
    engines = [make(n, slots_total=4, slots_busy=0, prefill_tokens_per_s=1e3) for n in ("w1", "w2")]
    api_now = make("api", ewma_ttft_ms=10.0)  # faster, but an API: after the engines
    decision = policy.route(RequestFacts(prompt_tokens=100), [api_now, *engines])
    assert decision.names[-1] == "api"
    # an API listed first, a second API, or a lone engine before it: an order to keep
    api2 = Sameness("api2", "gpt-4o-mini", "openai", sees_cache=False)
    for cands in ([api, W1, W2], [W1, W2, api, api2], [W1, api]):
        assert _steps(default_policy(cands))[-1] == "first", cands


def test_one_candidate_has_nothing_to_choose() -> None:
    policy = default_policy([W1], ttft_ms=500)
    assert _steps(policy)[-1] == "first" and policy.default_note is None


def test_every_decision_says_which_default_applied(make: Make) -> None:
    cands = [make("w1", slots_total=4, slots_busy=0), make("w2", slots_total=4, slots_busy=0)]
    policy = default_policy([W1, W2])
    request = RequestFacts(prompt_tokens=100)
    for explain in (True, False):
        decision = policy.route(request, cands, explain=explain)
        note = "default cached_prefix: 2 interchangeable openai engines"
        assert decision.remarks[-1] == note and decision.reason().endswith(f"; {note}")
    ordered = default_policy([W1, Sameness("api", "gpt", "openai")]).route(request, cands)
    assert ordered.names == ["w1", "w2"]
    assert ordered.reason() == "w1 by first config order; default first: w1, api differ in model"
