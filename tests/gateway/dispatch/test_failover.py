"""The failover rules on backends of our own contract whose answers are scripted: who is
retried, who is left, what a context-length rejection teaches, what the route header says."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from backends.base import Capabilities
from backends.http.errors import annotate
from gateway.admission.limits import DeploymentLimitedError, LimitExceededError
from gateway.config import parse_config
from gateway.dispatch import Gateway
from gateway.dispatch.failover.rules import CAUSES, cause_of
from gateway.dispatch.health.learned import ContextLimits, context_limit_in
from gateway.errors import (
    ContextLengthExceededError,
    GatewayError,
    RateLimitError,
    ServiceUnavailableError,
    StalledError,
    StreamCutError,
    UpstreamError,
    UpstreamTimeoutError,
)
from gateway.protocol import ChatCompletionRequest
from policies import RequestFacts
from tests.gateway.scripted import ScriptedBackend

REQUEST = ChatCompletionRequest.model_validate(
    {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
)
TOO_LONG = (
    "This model's maximum context length is 8192 tokens. However, your messages resulted "
    "in 9000 tokens. Please reduce the length of the messages."
)


@dataclass
class Sized(ScriptedBackend):
    """A scripted backend with a configured context length."""

    context: int | None = None

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(context_length=self.context)


def gateway(*backends: ScriptedBackend, extra: str = "") -> Gateway:
    names = [b.name for b in backends]
    deployments = "".join(f"  - {{name: {n}, backend: llamacpp, model: {n}.gguf}}\n" for n in names)
    config = parse_config(
        "deployments:\n"
        + deployments
        + f"models:\n  m: {{candidates: [{', '.join(names)}]{extra}}}\n"
        + "reliability: {retries: 1, backoff_base_s: 0, failure_threshold: 3}\n",
        "test.yaml",
    )
    return Gateway(config, {b.name: b for b in backends})


def upstream_said(error: GatewayError) -> GatewayError:
    """``error`` as an upstream's answer maps it: a deployment failure."""
    return annotate(error, counts_as_failure=True)


def long_request(tokens: int = 9000) -> RequestFacts:
    return RequestFacts(prompt_tokens=tokens, max_tokens=None)


async def test_a_rate_limited_deployment_is_left_for_a_free_one() -> None:
    a, b = ScriptedBackend("a", [upstream_said(RateLimitError("slow"))]), ScriptedBackend("b")
    gw = gateway(a, b)
    routed = await gw.call("m", lambda x: x.chat(REQUEST))
    assert routed.candidate.backend is b and a.calls == 1  # not retried: b was free
    assert routed.reason.startswith("b after a: rate_limited; policy: a")
    assert gw.breakers["a"].fallbacks == {"rate_limited": 1}


async def test_a_rate_limited_deployment_alone_is_retried() -> None:
    a = ScriptedBackend("a", [upstream_said(RateLimitError("slow down", retry_after=0.01))])
    routed = await gateway(a).call("m", lambda x: x.chat(REQUEST))
    assert routed.candidate.backend is a and a.calls == 2
    assert routed.reason == "a by first config order"  # where the policy sent it


async def test_a_server_error_is_retried_on_the_same_deployment_first() -> None:
    a, b = ScriptedBackend("a", [UpstreamError("boom")]), ScriptedBackend("b")
    routed = await gateway(a, b).call("m", lambda x: x.chat(REQUEST))
    assert routed.candidate.backend is a and a.calls == 2 and b.calls == 0


async def test_context_length_moves_on_learns_and_is_not_resent() -> None:
    a, b = ScriptedBackend("a", [ContextLengthExceededError(TOO_LONG)]), ScriptedBackend("b")
    gw = gateway(a, b)
    routed = await gw.call("m", lambda x: x.chat(REQUEST), request=long_request())
    assert routed.candidate.backend is b and a.calls == 1
    assert routed.reason.startswith("b after a: context_length")
    assert gw.context_limits.get("a") == 8192
    assert gw.breakers["a"].failures == 0  # it answered: the request was at fault
    # next time `capable` drops it for prompts that long, and keeps it for short ones
    assert [c.settings.name for c in gw.decide("m", long_request()).candidates] == ["b"]
    assert [c.settings.name for c in gw.decide("m", long_request(100)).candidates] == ["a", "b"]


async def test_context_length_skips_smaller_candidates_then_names_the_limit() -> None:
    a = ScriptedBackend("a", [ContextLengthExceededError(TOO_LONG)])
    b, c = Sized("b", context=4096), Sized("c", [ContextLengthExceededError(TOO_LONG)])
    gw = gateway(a, b, c)
    with pytest.raises(ContextLengthExceededError) as info:
        await gw.call("m", lambda x: x.chat(REQUEST), request=long_request(3000))
    assert (a.calls, b.calls, c.calls) == (1, 0, 1)  # b holds less than a: never tried
    assert "maximum context length is 8192 tokens" in info.value.message
    assert info.value.code == "context_length_exceeded" and info.value.param == "messages"


async def test_context_fallback_off_returns_the_rejection() -> None:
    a, b = ScriptedBackend("a", [ContextLengthExceededError(TOO_LONG)]), ScriptedBackend("b")
    gw = gateway(a, b, extra=", context_fallback: false")
    with pytest.raises(ContextLengthExceededError):
        await gw.call("m", lambda x: x.chat(REQUEST), request=long_request())
    assert b.calls == 0 and gw.context_limits.get("a") == 8192  # learned all the same


async def test_a_limit_it_does_not_name_is_learned_from_the_request() -> None:
    a = ScriptedBackend("a", [ContextLengthExceededError("prompt is too long")])
    gw = gateway(a, ScriptedBackend("b"))
    await gw.call("m", lambda x: x.chat(REQUEST), request=long_request(5000))
    assert gw.context_limits.get("a") == 4999


async def test_an_open_breaker_ahead_of_the_answer_is_a_fallback() -> None:
    a, b = ScriptedBackend("a", [UpstreamError(str(i)) for i in range(3)]), ScriptedBackend("b")
    gw = gateway(a, b)
    await gw.call("m", lambda x: x.chat(REQUEST))  # a fails twice (retry), b answers
    await gw.call("m", lambda x: x.chat(REQUEST))  # a fails a third time: open
    assert gw.breakers["a"].state == "open"
    routed = await gw.call("m", lambda x: x.chat(REQUEST))
    assert routed.reason.startswith("b after a: breaker_open")
    assert gw.breakers["a"].fallbacks == {"error": 2, "breaker_open": 1}


def test_causes() -> None:
    unavailable = ServiceUnavailableError("no connection")
    overloaded = UpstreamError("busy", upstream_status=503)
    cases: list[tuple[GatewayError, str]] = [
        (ContextLengthExceededError("x"), "context_length"),
        (DeploymentLimitedError("a", LimitExceededError("rpm", states=())), "limited"),
        (RateLimitError("x"), "rate_limited"),
        (StalledError("x"), "stalled"),
        (UpstreamTimeoutError("x"), "timeout"),
        (StreamCutError("x"), "cut"),
        (overloaded, "overloaded"),
        (unavailable, "unavailable"),
        (UpstreamError("x", upstream_status=500), "error"),
    ]
    for error, cause in cases:
        assert cause_of(error) == cause and cause in CAUSES


@pytest.mark.parametrize(
    ("message", "limit"),
    [
        (TOO_LONG, 8192),
        ("prompt is too long: 208310 tokens > 200000 maximum", 200000),
        (
            "Prompt contains 40000 tokens, too large for model with 32,768 maximum context length",
            32768,
        ),
        ("`inputs` tokens + `max_new_tokens` must be <= 8193. Given: 9000", 8193),
        ("the request exceeds the available context size", None),
    ],
)
def test_the_limit_a_rejection_names(message: str, limit: int | None) -> None:
    assert context_limit_in(ContextLengthExceededError(message)) == limit


def test_learned_limits_keep_the_smallest_and_expire() -> None:
    now = [0.0]
    limits = ContextLimits(clock=lambda: now[0])
    limits.learn("a", 8192, ttl_s=10)
    limits.learn("a", 16384, ttl_s=10)
    assert limits.get("a") == 8192
    now[0] = 10.0
    assert limits.get("a") is None


def test_fresh_limits_are_the_unexpired_ones() -> None:
    now = [0.0]
    limits = ContextLimits(clock=lambda: now[0])
    assert limits.fresh() == {}
    limits.learn("a", 8192, ttl_s=10)
    limits.learn("b", 4096, ttl_s=20)
    assert limits.fresh() == {"a": 8192, "b": 4096}
    now[0] = 10.0
    assert limits.fresh() == {"b": 4096}
    assert limits.get("a") is None and limits.remaining_s("a") == 0.0
