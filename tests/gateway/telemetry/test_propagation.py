"""Reading W3C trace context from a client's headers, and naming the step that chose."""

from __future__ import annotations

import pytest

from gateway.telemetry.propagation import (
    continued_traceparent,
    read_incoming,
    valid_traceparent,
)
from gateway.telemetry.tracing import deciding_step
from policies import Candidate, CandidateFacts, Policy, Pricing, RequestFacts

GOOD = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        (GOOD, True),
        ("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-later-fields", True),
        ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra", False),
        ("ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", False),
        ("00-00000000000000000000000000000000-b7ad6b7169203331-01", False),
        ("00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01", False),
        ("00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01", False),
        ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331", False),
        ("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01x", False),
        ("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-09", True),
    ],
)
def test_traceparent_validity(value: str, valid: bool) -> None:
    assert valid_traceparent(value) is valid


def test_a_later_version_is_carried_on_as_version_00_without_its_other_fields() -> None:
    later = b"cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0b-" + b"x" * 50_000
    expected = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert continued_traceparent(later) == expected
    found = read_incoming([(b"traceparent", later), (b"tracestate", b"a=1")])
    assert found.passed_through("r")["traceparent"] == expected
    assert found.tracestate == "a=1"
    assert continued_traceparent(GOOD.encode()) == GOOD


def test_headers_are_read_in_one_pass() -> None:
    found = read_incoming(
        [
            (b"x-request-id", b"abc-1"),
            (b"traceparent", GOOD.encode()),
            (b"tracestate", b"a=1"),
            (b"tracestate", b"b=2"),
            (b"baggage", b"k=v"),
        ]
    )
    assert (found.request_id, found.trace_id, found.parent_id) == (
        "abc-1",
        "0af7651916cd43dd8448eb211c80319c",
        "b7ad6b7169203331",
    )
    assert found.sampled
    assert found.passed_through("abc-1") == {
        "x-request-id": "abc-1",
        "traceparent": GOOD,
        "tracestate": "a=1,b=2",
        "baggage": "k=v",
    }


def test_unusable_values_are_dropped() -> None:
    found = read_incoming(
        [
            (b"x-request-id", b"has spaces"),
            (b"traceparent", b"garbage"),
            (b"tracestate", b"a=1"),
            (b"baggage", b"k=\x01"),
        ]
    )
    assert found == read_incoming([])
    assert read_incoming([(b"baggage", b"x" * 9000)]).baggage is None


def _candidate(name: str, cost: float) -> Candidate:
    return Candidate(CandidateFacts(name, "openai", pricing=Pricing(cost, cost)))


def test_the_deciding_step_is_the_first_ranker_that_separated_the_winner() -> None:
    request = RequestFacts(prompt_tokens=10)
    pool = [_candidate("a", 2.0), _candidate("b", 1.0)]
    cheapest = Policy.parse(["healthy", "cheapest"]).route(request, pool)
    assert deciding_step(cheapest, "b") == "cheapest"
    assert deciding_step(cheapest, "a") == "fallback"
    assert deciding_step(Policy.parse(["first"]).route(request, pool), "a") == "order"
    assert deciding_step(Policy.parse(["healthy"]).route(request, pool[:1]), "a") == "only"
    assert deciding_step(None, "a") == "none"
