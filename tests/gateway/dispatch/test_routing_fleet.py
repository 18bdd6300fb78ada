"""A big fleet: the gateway's per-request decision equals the one ``shunter route``
explains (the full path over fresh candidates), while breakers open, context lengths are
learned and deployments are measured between requests."""

from __future__ import annotations

import time

import pytest

from gateway.config import parse_config
from gateway.dispatch import Gateway
from policies import RequestFacts

FIVE_STEPS = "[healthy, capable, fits_memory, {slo: {ttft_ms: 900}}, cheapest]"


def fleet(size: int, policy: str) -> Gateway:
    lines = ["deployments:"]
    for i in range(size):
        context = f", context_length: {2048 + 512 * (i % 5)}" if i % 3 else ""
        lines.append(
            f"  - {{name: d{i}, backend: openai, base_url: 'http://127.0.0.1:9/v1', model: up, "
            f"price: {{input_per_1m: {0.1 + i % 7 / 10}, output_per_1m: 0.6}}{context}}}"
        )
    names = ", ".join(f"d{i}" for i in range(size))
    lines.append(f"models:\n  m: {{candidates: [{names}], policy: {policy}}}")
    return Gateway.from_config(parse_config("\n".join(lines) + "\n", "fleet.yaml"))


def explained(gateway: Gateway, request: RequestFacts) -> tuple[list[str], str]:
    """What ``shunter route`` shows: the full path over freshly described candidates."""
    route = gateway.route("m")
    decision = route.policy.route(request, gateway.policy_candidates("m"), now=time.monotonic())
    return decision.names, decision.reason()


@pytest.mark.parametrize(
    "policy", ["[first]", "[healthy, capable, fits_memory, first]", FIVE_STEPS]
)
def test_decisions_over_a_thousand_deployments_match_the_explained_ones(policy: str) -> None:
    gateway = fleet(1000, policy)
    request = RequestFacts(prompt_tokens=2500, max_tokens=200)
    for round_ in range(4):
        routing = gateway.decide("m", request)
        names, reason = explained(gateway, request)
        assert [c.settings.name for c in routing.candidates] == names
        assert [c.settings.name for c in routing.candidates[1:]] == names[1:]
        assert routing.reason == reason
        # change the fleet between requests: what the caches must notice
        first = routing.candidates[0].settings.name
        gateway.breakers[first].open_for(60)
        gateway.context_limits.learn(names[1], 1024 + round_)
        tracked = gateway.trackers[names[2]].begin(500)
        tracked.first_token()
        tracked.finish(20)
    moved = gateway.decide("m", request).candidates[0].settings.name != names[0]
    assert moved == ("healthy" in policy)  # the breaker opened on the last chosen one
