"""Admission: auth, budget and limits around one request, as the HTTP layer will call it."""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field

import pytest

from backends.base import Price
from gateway.admission.admit import Admission, AdmissionTicket
from gateway.admission.keys import KeyRing
from gateway.admission.limits import Budgets, DeploymentLimitedError, Limiter, RateLimit
from gateway.config import GatewayConfig, ModelRoute
from gateway.dispatch import describe_request
from gateway.errors import AuthenticationError, RateLimitError
from gateway.protocol import ChatCompletionRequest, CompletionRequest, Usage
from gateway.state import MemoryStateStore, StateStore
from policies import RequestFacts

PRICES = {"gpu-a": Price(input_per_1m=1.0, output_per_1m=3.0), "gpu-b": None}


ROUTES = {
    "tiny": ModelRoute(candidates=["gpu-a", "gpu-b"]),
    "free": ModelRoute(candidates=["gpu-b"]),
    "cascade": ModelRoute.model_validate(
        {"candidates": ["gpu-b", "gpu-a", "gpu-a"], "cascade": {"min_confidence": 0.5}}
    ),
}


def admission(store: StateStore, **limits: RateLimit) -> Admission:
    return Admission(
        KeyRing(store),
        Limiter(store),
        Budgets(store),
        prices=PRICES,
        routes=ROUTES,
        deployment_limits=limits,
    )


@dataclass(frozen=True)
class Asked:
    """A request as admission is asked about it: its model, the caller's header, and its
    one description (its prompt estimate, its output, its server tools)."""

    model: str
    authorization: str | None
    prompt: int
    max_tokens: int | None
    server_tools: dict[str, int | None] = field(default_factory=dict)


def facts(secret: str, prompt: int = 100, max_tokens: int | None = 50) -> Asked:
    return Asked("tiny", f"Bearer {secret}", prompt, max_tokens)


async def admit(gate: Admission, asked: Asked) -> AdmissionTicket:
    """What the request spine does: the caller from its header, then admission."""
    key = await gate.authenticate(asked.authorization)
    described = RequestFacts(
        prompt_tokens=asked.prompt, max_tokens=asked.max_tokens, server_tools=asked.server_tools
    )
    return await gate.admit(asked.model, described, key)


def test_prompt_estimates() -> None:
    """Admission reserves from the one description routing reads too."""
    chat = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "x" * 400}], "max_tokens": 7}
    )
    estimate = describe_request(chat)
    assert (estimate.prompt_tokens, estimate.max_tokens, estimate.n) == (104, 7, 1)
    text = CompletionRequest.model_validate({"model": "m", "prompt": ["abcd", "ab"], "n": 2})
    estimate = describe_request(text)
    assert (estimate.prompt_tokens, estimate.max_tokens, estimate.n) == (4, 16, 2)


async def test_admit_reserves_prompt_plus_max_tokens_and_settle_reconciles(
    store: StateStore,
) -> None:
    gate = admission(store, **{"gpu-a": RateLimit(rpm=100, tpm=10_000)})
    secret, _ = await gate.keys.create("ci", rpm=5, tpm=1000)
    started = time.monotonic()
    ticket = await admit(gate, facts(secret))
    assert ticket.tokens == 150
    await gate.admit_deployment(ticket, "gpu-a")
    headers = gate.headers(ticket)
    assert headers["x-ratelimit-limit-requests"] == "5"  # the key's, tighter than gpu-a's
    assert headers["x-ratelimit-remaining-requests"] == "4"
    assert headers["x-ratelimit-remaining-tokens"] == "850"

    cost = await gate.settle(ticket, Usage.of(100, 20))
    assert cost == pytest.approx((100 * 1.0 + 20 * 3.0) / 1e6)
    assert await gate.settle(ticket, Usage.of(100, 20)) == cost  # idempotent
    probe = await admit(gate, facts(secret, prompt=0, max_tokens=1))
    # 1000 - 120 - 1, plus what refilled meanwhile: a token per 60 ms at 1000 a minute
    refilled = math.ceil((time.monotonic() - started) / 0.06)
    remaining = int(gate.headers(probe)["x-ratelimit-remaining-tokens"])
    assert 879 <= remaining <= 879 + refilled


async def test_budget_is_charged_at_settle_and_refuses_when_exhausted(
    store: StateStore,
) -> None:
    gate = admission(store)
    secret, record = await gate.keys.create("ci", budget_usd=0.0002, budget_window_s=86400)
    for _ in range(2):
        ticket = await admit(gate, facts(secret))
        await gate.admit_deployment(ticket, "gpu-a")
        await gate.settle(ticket, Usage.of(100, 20))  # $0.00016 each
    spent = await store.spend_get(f"key:{record.id}", 86400)
    assert spent.usd == pytest.approx(0.00032)
    with pytest.raises(RateLimitError) as caught:
        await admit(gate, facts(secret))
    assert caught.value.code == "insufficient_quota"
    assert caught.value.headers()["x-should-retry"] == "false"


async def test_a_limited_deployment_refuses_so_dispatch_can_fall_back() -> None:
    store = MemoryStateStore()
    gate = admission(store, **{"gpu-a": RateLimit(rpm=1)})
    secret, _ = await gate.keys.create("ci", tpm=1000)
    first = await admit(gate, facts(secret))
    await gate.admit_deployment(first, "gpu-a")
    second = await admit(gate, facts(secret))
    with pytest.raises(DeploymentLimitedError) as caught:
        await gate.admit_deployment(second, "gpu-a")
    assert "deployment 'gpu-a'" in caught.value.message
    assert caught.value.deployment == "gpu-a" and caught.value.status_code == 429
    assert caught.value.retry_after == pytest.approx(60, abs=1)
    assert caught.value.headers()["x-ratelimit-limit-requests"] == "1"
    assert not caught.value.counts_as_failure  # never a breaker failure
    await gate.admit_deployment(second, "gpu-b")  # no limits there
    assert second.deployment == "gpu-b" and second.attempts == ["gpu-a", "gpu-b"]
    await gate.settle(second, Usage.of(10, 10))
    assert second.cost_usd == 0  # gpu-b has no price


async def test_an_attempt_that_failed_gives_its_deployment_tokens_back() -> None:
    store = MemoryStateStore(clock=lambda: 1_800_000_000.0)  # stopped: nothing refills
    gate = admission(store, **{"gpu-a": RateLimit(tpm=1000), "gpu-b": RateLimit(tpm=1000)})
    secret, _ = await gate.keys.create("ci")
    ticket = await admit(gate, facts(secret, prompt=300, max_tokens=100))
    await gate.admit_deployment(ticket, "gpu-a")
    await gate.admit_deployment(ticket, "gpu-b")  # gpu-a failed upstream
    on_a = await admit(gate, facts(secret, prompt=0, max_tokens=1))
    await gate.admit_deployment(on_a, "gpu-a")
    assert gate.headers(on_a)["x-ratelimit-remaining-tokens"] == "999"
    on_b = await admit(gate, facts(secret, prompt=0, max_tokens=1))
    await gate.admit_deployment(on_b, "gpu-b")
    assert gate.headers(on_b)["x-ratelimit-remaining-tokens"] == "599"


async def test_release_gives_back_the_request_and_tokens() -> None:
    store = MemoryStateStore()
    gate = admission(store)
    secret, _ = await gate.keys.create("ci", rpm=2, tpm=1000)
    for _ in range(3):
        ticket: AdmissionTicket = await admit(gate, facts(secret))
        await gate.release(ticket)
    assert gate.headers(ticket)["x-ratelimit-remaining-requests"] == "1"


async def test_open_mode_admits_anonymous_requests_without_limits() -> None:
    gate = admission(MemoryStateStore())
    ticket = await admit(gate, Asked("tiny", None, 10, None))
    assert ticket.key.id == "anonymous"
    assert ticket.tokens == 10 + 1024
    assert gate.headers(ticket) == {}


async def test_auth_errors_come_first() -> None:
    environ = {"SHUNTER_MASTER_KEY": "sk-master"}
    gate = Admission.build(MemoryStateStore(), _config(), environ=environ)
    with pytest.raises(AuthenticationError):
        await admit(gate, Asked("tiny", "Bearer nope", 10, None))
    ticket = await admit(gate, Asked("tiny", "Bearer sk-master", 10, None))
    assert ticket.key.admin
    assert gate.prices == {"a": Price(input_per_1m=2.0)}


def _config() -> GatewayConfig:
    return GatewayConfig.model_validate(
        {
            "deployments": [
                {
                    "name": "a",
                    "backend": "llamacpp",
                    "model": "/models/tiny.gguf",
                    "price": {"input_per_1m": 2.0},
                }
            ],
            "models": {"tiny": {"candidates": ["a"]}},
        }
    )


async def test_an_explicit_cost_wins_and_a_reloaded_config_updates_prices() -> None:
    store = MemoryStateStore()
    gate = admission(store)
    secret, record = await gate.keys.create("ci", budget_usd=10, budget_window_s=3600)
    ticket = await admit(gate, facts(secret))
    await gate.admit_deployment(ticket, "gpu-a", RateLimit(rpm=7))
    assert gate.headers(ticket)["x-ratelimit-limit-requests"] == "7"
    assert await gate.settle(ticket, Usage.of(1, 1), cost=0.5) == 0.5
    assert (await store.spend_get(f"key:{record.id}", 3600)).usd == pytest.approx(0.5)
    gate.apply(_config())
    assert gate.prices == {"a": Price(input_per_1m=2.0)}


async def test_concurrent_requests_hold_their_worst_case_before_they_run(
    store: StateStore,
) -> None:
    gate = admission(store)
    # worst case at gpu-a (the dearer candidate): 100 prompt + 50 output = $0.00025
    secret, record = await gate.keys.create("ci", budget_usd=0.0006)
    outcomes = await asyncio.gather(
        *(admit(gate, facts(secret)) for _ in range(10)), return_exceptions=True
    )
    admitted = [t for t in outcomes if isinstance(t, AdmissionTicket)]
    assert len(admitted) == 3  # held 0, 0.00025, 0.0005: each under the budget
    refused = [e for e in outcomes if isinstance(e, RateLimitError)]
    assert len(refused) == 7 and all(e.should_retry for e in refused)
    assert "held by requests in flight" in refused[0].message
    for ticket in admitted:
        await gate.admit_deployment(ticket, "gpu-a")
        await gate.settle(ticket, Usage.of(100, 50))
    spend = await store.spend_get(f"key:{record.id}", record.budget_window_s)
    assert (spend.usd, spend.held_usd) == pytest.approx((0.00075, 0))
    with pytest.raises(RateLimitError) as caught:
        await admit(gate, facts(secret))
    assert caught.value.code == "insufficient_quota"


async def test_a_request_that_fails_or_is_refused_gives_its_hold_back() -> None:
    store = MemoryStateStore()
    gate = admission(store)
    secret, record = await gate.keys.create("ci", rpm=1, budget_usd=1.0)
    scope, window = f"key:{record.id}", record.budget_window_s
    ticket = await admit(gate, facts(secret))
    assert (await store.spend_get(scope, window)).held_usd == pytest.approx(0.00025)
    await gate.settle(ticket, None)  # failed upstream: nothing charged, the request counts
    assert (await store.spend_get(scope, window)).held_usd == 0
    with pytest.raises(RateLimitError):  # the RPM limit refuses after the hold was taken
        await admit(gate, facts(secret))
    assert (await store.spend_get(scope, window)).held_usd == 0


async def test_the_worst_case_of_a_cascade_counts_every_candidate() -> None:
    gate = admission(MemoryStateStore())
    assert gate.worst_case_usd("tiny", 100, 50) == pytest.approx(0.00025)
    assert gate.worst_case_usd("cascade", 100, 50) == pytest.approx(0.0005)
    assert gate.worst_case_usd("free", 100, 50) == 0
    assert gate.worst_case_usd("unknown", 100, 50) == 0


async def test_server_tools_are_held_at_their_max_uses_or_the_reserve() -> None:
    searching = Price(server_tools={"web_search": 0.01}, server_tool_reserve=4)
    gate = Admission(
        KeyRing(MemoryStateStore()),
        Limiter(MemoryStateStore()),
        Budgets(MemoryStateStore()),
        prices={"claude": searching},
        routes={"claude": ModelRoute(candidates=["claude"])},
    )
    assert gate.worst_case_usd("claude", 0, 0, {"web_search": 50}) == pytest.approx(0.5)
    assert gate.worst_case_usd("claude", 0, 0, {"web_search": None}) == pytest.approx(0.04)
    assert gate.worst_case_usd("claude", 0, 0, {"code_execution": 9}) == 0  # not priced
    used = Usage.of(0, 0)
    used.server_tool_uses = {"web_search": 3}
    secret, _ = await gate.keys.create("ci", budget_usd=1.0)
    ticket = await admit(gate, Asked("claude", f"Bearer {secret}", 0, 0))
    await gate.admit_deployment(ticket, "claude")
    assert await gate.settle(ticket, used) == pytest.approx(0.03)
