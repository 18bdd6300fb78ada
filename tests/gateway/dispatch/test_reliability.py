"""Circuit breaker states and the dispatcher's retry / fallback rules."""

from __future__ import annotations

import pytest

from gateway.config import ReliabilitySettings, parse_config
from gateway.dispatch import Gateway
from gateway.dispatch.health.breakers import (
    ATTEMPT_WINDOW_S,
    CircuitBreaker,
    backoff_delay,
    spacing_delay,
)
from gateway.errors import (
    GatewayError,
    InvalidRequestError,
    ServiceUnavailableError,
    UpstreamError,
)
from gateway.protocol import (
    ChatCompletionRequest,
)
from gateway.protocol.frames import Framed
from tests.gateway.scripted import ScriptedBackend


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_breaker_opens_after_threshold_and_probes_once() -> None:
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=2, cooldown_s=10, max_cooldown_s=40, clock=clock)
    breaker.record_failure()
    assert breaker.state == "closed" and breaker.allow()
    breaker.record_failure()
    assert breaker.state == "open" and not breaker.allow()
    assert breaker.retry_in() == pytest.approx(10)
    clock.now += 10
    assert breaker.state == "half_open"
    assert breaker.allow()  # the probe
    assert not breaker.allow()  # only one at a time
    breaker.record_failure()  # probe failed: open again, twice as long
    assert breaker.state == "open" and breaker.retry_in() == pytest.approx(20)
    clock.now += 20
    assert breaker.allow()
    breaker.record_success()
    assert breaker.state == "closed" and breaker.allow()


def test_abandoned_probe_is_released() -> None:
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=1, cooldown_s=1, clock=clock)
    breaker.record_failure()
    clock.now += 1
    assert breaker.allow()
    breaker.record_abandoned()
    assert breaker.allow()


def test_backoff_prefers_retry_after() -> None:
    settings = ReliabilitySettings(backoff_base_s=0.1, backoff_max_s=0.3)
    assert backoff_delay(0, 1.5, settings) == 1.5
    assert all(0 <= backoff_delay(5, None, settings) <= 0.3 for _ in range(50))


CONFIG = """
deployments:
  - {name: a, backend: llamacpp, model: x.gguf}
  - {name: b, backend: llamacpp, model: y.gguf}
models:
  m: {candidates: [a, b]}
reliability: {retries: 1, backoff_base_s: 0, failure_threshold: 2, cooldown_s: 30}
"""
REQUEST = ChatCompletionRequest.model_validate(
    {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
)


def gateway(a: ScriptedBackend, b: ScriptedBackend) -> Gateway:
    return Gateway(parse_config(CONFIG, "test.yaml"), {"a": a, "b": b})


async def test_retry_then_success_on_same_deployment() -> None:
    a, b = ScriptedBackend("a", [UpstreamError("boom")]), ScriptedBackend("b")
    routed = await gateway(a, b).call("m", lambda x: x.chat(REQUEST))
    chosen, result = routed.candidate, routed.value
    assert chosen.backend is a and a.calls == 2 and b.calls == 0
    assert result.choices[0].message.content == "ok"


async def test_fallback_after_retries_and_breaker_skips_open_deployment() -> None:
    a = ScriptedBackend("a", [UpstreamError("1"), UpstreamError("2"), UpstreamError("3")])
    b = ScriptedBackend("b")
    gw = gateway(a, b)
    chosen = (await gw.call("m", lambda x: x.chat(REQUEST))).candidate
    assert chosen.backend is b and a.calls == 2
    assert gw.breakers["a"].state == "open"
    chosen = (await gw.call("m", lambda x: x.chat(REQUEST))).candidate
    assert chosen.backend is b and a.calls == 2  # not tried while open


async def test_request_errors_are_not_retried_and_do_not_trip_breaker() -> None:
    a, b = ScriptedBackend("a", [InvalidRequestError("bad", param="x")]), ScriptedBackend("b")
    gw = gateway(a, b)
    with pytest.raises(InvalidRequestError):
        await gw.call("m", lambda x: x.chat(REQUEST))
    assert a.calls == 1 and b.calls == 0 and gw.breakers["a"].failures == 0


async def test_long_retry_after_moves_on_instead_of_waiting() -> None:
    a = ScriptedBackend("a", [ServiceUnavailableError("busy", retry_after=60)])
    b = ScriptedBackend("b")
    chosen = (await gateway(a, b).call("m", lambda x: x.chat(REQUEST))).candidate
    assert chosen.backend is b and a.calls == 1


async def test_all_candidates_cooling_down_says_so() -> None:
    errors: list[GatewayError | str] = [UpstreamError(str(i)) for i in range(4)]
    a, b = ScriptedBackend("a", errors[:2]), ScriptedBackend("b", errors[2:])
    gw = gateway(a, b)
    with pytest.raises(UpstreamError):
        await gw.call("m", lambda x: x.chat(REQUEST))
    with pytest.raises(ServiceUnavailableError) as info:
        await gw.call("m", lambda x: x.chat(REQUEST))
    assert info.value.code == "deployments_cooling_down"
    assert info.value.retry_after is not None and info.value.retry_after >= 1


async def test_stream_falls_back_before_first_chunk() -> None:
    a, b = ScriptedBackend("a", [UpstreamError("x"), UpstreamError("y")]), ScriptedBackend("b")
    opened = await gateway(a, b).open_stream("m", lambda x: Framed(x.chat_stream(REQUEST)))
    assert opened.backend is b
    assert opened.first.startswith(b"data: ") and b'"content":"ok"' in opened.first


def test_cooldown_doubles_up_to_its_cap_and_a_passed_probe_ends_it() -> None:
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=1, cooldown_s=5, max_cooldown_s=10, clock=clock)
    cooldowns = []
    for _ in range(4):
        breaker.record_failure()
        cooldowns.append(breaker.retry_in())
        clock.now += breaker.retry_in()
        assert breaker.allow()  # the trial
    assert cooldowns == [5, 10, 10, 10]
    breaker.record_failure()
    assert breaker.state == "open"
    breaker.probe_passed()
    assert breaker.state == "half_open" and breaker.allow() and not breaker.allow()
    breaker.record_success()
    assert breaker.state == "closed" and breaker.closed_at == clock.now


def test_a_deployment_that_fails_soon_after_recovering_opens_at_its_first_failure() -> None:
    clock = Clock()
    breaker = CircuitBreaker(
        failure_threshold=3, cooldown_s=5, max_cooldown_s=10, clock=clock, flap_window_s=60
    )
    for _ in range(3):  # the first outage: a threshold's worth of failures
        breaker.record_failure()
    assert breaker.state == "open"
    clock.now += 5
    assert breaker.allow()
    breaker.record_success()  # recovered
    clock.now += 30
    breaker.record_failure()  # down again within the window: flapping
    assert breaker.state == "open" and breaker.retry_in() == pytest.approx(5)
    clock.now += 5
    assert breaker.allow()
    breaker.record_success()
    clock.now += 61  # past the window: a failure is one of a threshold again
    breaker.record_failure()
    assert breaker.state == "closed"
    breaker.record_success()  # a success that ends no opening starts no window
    breaker.record_failure()
    assert breaker.state == "closed"


def test_a_rate_limit_soon_after_recovering_is_not_flapping() -> None:
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=3, cooldown_s=5, clock=clock, flap_window_s=60)
    for _ in range(3):
        breaker.record_failure()
    clock.now += 5
    assert breaker.allow()
    breaker.record_success()
    breaker.record_failure(down=False)  # a 429: busy, not down
    assert breaker.state == "closed"
    breaker.record_failure()  # then down, with one failure short of the threshold: flapping
    assert breaker.state == "open"


def test_the_flap_window_is_off_at_zero() -> None:
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=2, cooldown_s=5, clock=clock, flap_window_s=0)
    breaker.record_failure()
    breaker.record_failure()
    clock.now += 5
    assert breaker.allow()
    breaker.record_success()
    breaker.record_failure()
    assert breaker.state == "closed"


def test_a_probe_does_not_touch_a_closed_breaker() -> None:
    breaker = CircuitBreaker(failure_threshold=3)
    breaker.record_failure()
    breaker.probe_passed()
    assert breaker.state == "closed" and breaker.failures == 1


def test_at_most_two_attempts_within_the_window() -> None:
    assert spacing_delay([], 10.0) == 0.0
    assert spacing_delay([10.0], 10.1) == 0.0
    assert spacing_delay([10.0, 10.2], 10.3) == pytest.approx(ATTEMPT_WINDOW_S - 0.3)
    assert spacing_delay([10.0, 10.2], 11.5) == 0.0


def test_default_backoff_waits_like_a_good_client() -> None:
    settings = ReliabilitySettings()
    first = [backoff_delay(0, None, settings) for _ in range(200)]
    assert all(0 <= d <= 0.5 for d in first) and max(first) > 0.25  # full jitter up to 0.5 s
    assert all(backoff_delay(9, None, settings) <= settings.backoff_max_s for _ in range(50))
