"""Session limits at admission: the key's own limits win over the config's, a session
refusal gives back what the key's limits took, and settling frees the session's hold."""

from __future__ import annotations

import pytest

from backends.base import Price
from gateway.admission.admit import Admission
from gateway.admission.keys import KeyInfo, KeyRing, KeySessionLimits
from gateway.admission.limits import Budgets, Limiter
from gateway.admission.session_limits import SessionGuard, SessionLimits, SessionStoppedError
from gateway.admission.sessions import SessionId, session_of
from gateway.config import ModelRoute, SessionSettings
from gateway.errors import RateLimitError
from gateway.protocol import Usage
from gateway.state import StateStore
from policies import RequestFacts

PRICE = Price(input_per_1m=0.0, output_per_1m=1000.0)  # $0.001 an output token
SETTINGS = SessionSettings.model_validate({"budget_usd": 0.05, "loop_guard": {"repeats": 3}})


def admission(store: StateStore) -> Admission:
    limiter = Limiter(store)
    return Admission(
        KeyRing(store),
        limiter,
        Budgets(store),
        prices={"up": PRICE},
        routes={"m": ModelRoute(candidates=["up"])},
        sessions=SessionGuard(store, limiter, SETTINGS),
    )


def facts(repeat: tuple[str, int] | None = None) -> RequestFacts:
    """10 prompt tokens, 20 output tokens at most: $0.02 at worst; ``repeat``: the tool call
    the conversation ends repeating, and how many times in a row."""
    return RequestFacts(prompt_tokens=10, max_tokens=20, tool_repeat=repeat)


def session(key: KeyInfo, name: str) -> SessionId:
    found = session_of(key.id, header=name)
    assert found is not None
    return found


async def test_a_session_is_refused_past_its_budget_and_freed_by_settling(
    store: StateStore,
) -> None:
    gate = admission(store)
    key = KeyInfo.of((await gate.keys.create("ci"))[1])
    one = session(key, "agent-1")
    tickets = [await gate.admit("m", facts(), key, one) for _ in range(2)]
    with pytest.raises(SessionStoppedError) as refused:
        await gate.admit("m", facts(), key, one)
    assert refused.value.code == "session_budget_exceeded"
    assert refused.value.should_retry  # held by requests in flight, not spent
    await gate.admit_deployment(tickets[0], "up")
    await gate.settle(tickets[0], Usage(prompt_tokens=10, completion_tokens=5))  # $0.005
    third = await gate.admit("m", facts(), key, one)
    assert third.session_id == one.id
    await gate.admit("m", facts(), key, session(key, "agent-2"))  # another session goes on


async def test_a_spent_session_is_refused_without_retry(store: StateStore) -> None:
    gate = admission(store)
    key = KeyInfo.of((await gate.keys.create("ci"))[1])
    one = session(key, "agent-1")
    for _ in range(2):
        ticket = await gate.admit("m", facts(), key, one)
        await gate.admit_deployment(ticket, "up")
        await gate.settle(ticket, Usage(prompt_tokens=10, completion_tokens=20))
    with pytest.raises(SessionStoppedError) as refused:
        await gate.admit("m", facts(), key, one)
    assert not refused.value.should_retry and refused.value.reason == "budget"
    assert "agent-1" in refused.value.message and "$0.05" in refused.value.message


async def test_a_session_refusal_gives_back_the_key_rate(store: StateStore) -> None:
    gate = admission(store)
    key = KeyInfo.of((await gate.keys.create("ci", rpm=2))[1])
    looping = ("read_file", 3)
    for _ in range(5):
        with pytest.raises(SessionStoppedError) as refused:
            await gate.admit("m", facts(looping), key, session(key, "loop"))
        assert refused.value.code == "session_loop_detected"
    # the key's two requests a minute are all still there
    await gate.admit("m", facts(), key, session(key, "a"))
    await gate.admit("m", facts(), key, session(key, "b"))
    with pytest.raises(RateLimitError):
        await gate.admit("m", facts(), key, session(key, "c"))


async def test_the_loop_guard_counts_repeats_from_the_limit_on(store: StateStore) -> None:
    gate = admission(store)
    key = KeyInfo.of((await gate.keys.create("ci"))[1])
    await gate.admit("m", facts(("ls", 2)), key, session(key, "x"))
    with pytest.raises(SessionStoppedError) as refused:
        await gate.admit("m", facts(("ls", 3)), key, session(key, "x"))
    assert "'ls'" in refused.value.message and "3 times" in refused.value.message


def test_a_keys_own_session_limits_win() -> None:
    own = KeySessionLimits(budget_usd=1.0, loop_repeats=5, rpm=7)
    key = KeyInfo(id="k", name="k", session=own)
    limits = SessionLimits.of(SETTINGS, key)
    assert (limits.budget_usd, limits.loop_repeats, limits.rpm) == (1.0, 5, 7)
    default = SessionLimits.of(SETTINGS, KeyInfo(id="j", name="j"))
    assert (default.budget_usd, default.loop_repeats, default.rpm) == (0.05, 3, None)


async def test_without_a_session_nothing_is_held(store: StateStore) -> None:
    gate = admission(store)
    key = KeyInfo.of((await gate.keys.create("ci"))[1])
    for _ in range(5):
        ticket = await gate.admit("m", facts(), key)
        assert ticket.session is None


async def test_a_session_token_cap_names_the_tokens(store: StateStore) -> None:
    gate = admission(store)
    own = KeySessionLimits(max_tokens=50)
    key = KeyInfo.of((await gate.keys.create("ci", session=own))[1])
    assert key.session == own
    one = session(key, "tokens")
    ticket = await gate.admit("m", facts(), key, one)  # 10 + 20 tokens held
    await gate.admit_deployment(ticket, "up")
    await gate.settle(ticket, Usage(prompt_tokens=10, completion_tokens=20))
    with pytest.raises(SessionStoppedError) as refused:
        await gate.admit("m", facts(), key, one)
    assert refused.value.reason == "tokens" and not refused.value.should_retry
    assert "limit of 50 tokens" in refused.value.message
