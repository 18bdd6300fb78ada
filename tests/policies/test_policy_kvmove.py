"""Moving a conversation's KV against prefilling it again: the prediction, and the
``cached_prefix`` ranker pricing a move the gateway would make."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from policies import Candidate, Policy, RequestFacts
from policies.kvmove import (
    DEFAULT_IMPORT_BYTES_PER_S,
    DEFAULT_LINK_BYTES_PER_S,
    MOVE_FIXED_MS,
    megabytes,
    predict_move,
    transfer_ms,
)

Make = Callable[..., Candidate]

# a conversation: system prompt (1000 chars), first turn (to 16000), this turn (to 20000)
CHAIN = (("sys", 1000), ("turn1", 16000), ("turn2", 20000))
REQ = RequestFacts(prompt_tokens=5000, max_tokens=10, prefix_chain=CHAIN, prefix_shared=1)
KV = {"kv_fingerprint": "fp", "kv_bytes_per_token": 12_000.0}
ENGINE = {"slots_total": 4, "slots_busy": 0, "prefill_tokens_per_s": 200.0, **KV}


def test_a_move_is_its_bytes_at_the_learned_rates_against_the_spared_prefill(make: Make) -> None:
    home = make("home", held_prefixes={"sys": 250, "turn1": 4000}, **ENGINE)
    away = make("away", held_prefixes={"sys": 250}, **ENGINE)
    estimate = predict_move(REQ, [home, away], target=1)
    assert estimate is not None
    assert (estimate.source_name, estimate.link, estimate.tokens) == ("home", "turn1", 4000)
    assert estimate.spared == 3750 and estimate.n_bytes == 48_000_000
    assert estimate.reprefill_ms == pytest.approx(3750 / 200 * 1000)
    per_byte = 1 / DEFAULT_LINK_BYTES_PER_S + 1 / DEFAULT_IMPORT_BYTES_PER_S
    assert estimate.move_ms == pytest.approx(MOVE_FIXED_MS + 48e9 * per_byte)
    assert estimate.pays and estimate.why_not is None

    learned = make("away", held_prefixes={"sys": 250}, **{**ENGINE, "kv_move_bytes_per_s": 1e9})
    faster = predict_move(REQ, [home, learned], target=1)
    assert faster is not None and faster.move_ms < estimate.move_ms
    # another target learned nothing yet: the overall rate of those that did
    assert transfer_ms(1000, away, [home, learned]) == transfer_ms(1000, learned)


def test_no_move_between_engines_of_other_fingerprints_or_of_unknown_kv_size(make: Make) -> None:
    home = make("home", held_prefixes={"turn1": 4000}, **ENGINE)
    other = make("other", **{**ENGINE, "kv_fingerprint": "flash-off"})
    assert predict_move(REQ, [home, other], target=1) is None
    unknown = {**ENGINE, "kv_fingerprint": None}
    assert predict_move(REQ, [make("h", held_prefixes={"turn1": 4000}, **unknown),
                              make("t", **unknown)], target=1) is None  # fmt: skip
    sizeless = {**ENGINE, "kv_bytes_per_token": None}
    assert predict_move(REQ, [make("h", held_prefixes={"turn1": 4000}, **sizeless),
                              make("t", **sizeless)], target=1) is None  # fmt: skip
    # only the start every conversation shares: nothing of this one to move
    shared = make("shared", held_prefixes={"sys": 250}, **ENGINE)
    assert predict_move(REQ, [shared, other, make("t", **ENGINE)], target=2) is None
    # the target holding as much as any other: nothing to move
    same = make("same", held_prefixes={"turn1": 4000}, **ENGINE)
    assert predict_move(REQ, [home, same], target=1) is None


def test_a_cheap_re_prefill_or_a_slow_link_skips_the_move_and_says_why(make: Make) -> None:
    short = make("home", held_prefixes={"sys": 250, "turn1": 400}, **ENGINE)
    away = make("away", held_prefixes={"sys": 250}, **ENGINE)
    estimate = predict_move(REQ, [short, away], target=1)
    assert estimate is not None and not estimate.pays
    assert estimate.why_not == "re-prefill of 150 tokens is cheap (< 256)"

    home = make("home", held_prefixes={"turn1": 4000}, **ENGINE)
    slow = make("away", **{**ENGINE, "kv_move_bytes_per_s": 1e6, "prefill_tokens_per_s": 1e5})
    estimate = predict_move(REQ, [home, slow], target=1)
    assert estimate is not None and not estimate.pays
    assert estimate.why_not == ("predicted 48.18 s for 48 MB from home against re-prefill 0.04 s")
    unmeasured = {**ENGINE, "prefill_tokens_per_s": None}
    estimate = predict_move(
        REQ, [make("h", held_prefixes={"turn1": 4000}, **unmeasured), make("t", **unmeasured)], 1
    )
    assert estimate is not None and estimate.why_not == "no prefill rate measured to compare with"


def test_the_source_is_whichever_compatible_engine_holds_most(make: Make) -> None:
    some = make("some", held_prefixes={"turn1": 4000}, **ENGINE)
    most = make("most", held_prefixes={"turn1": 4000, "turn2": 5000}, **ENGINE)
    alien = make("alien", held_prefixes={"turn2": 5000}, **{**ENGINE, "kv_fingerprint": "x"})
    target = make("target", **ENGINE)
    estimate = predict_move(REQ, [some, alien, most, target], target=3)
    assert estimate is not None and (estimate.source_name, estimate.link) == ("most", "turn2")


def test_leaving_home_is_priced_as_the_move_where_one_is_possible(make: Make) -> None:
    """The ranker and the move agree: a home whose wait is longer than moving its KV (but
    shorter than re-prefilling it elsewhere) loses the request only where the move is
    possible."""
    queue = {"slots_busy": 4, "ewma_service_ms": 8000.0}  # home: 2 s wait, 5 s prefill
    home = make("home", held_prefixes={"sys": 250, "turn1": 4000}, **{**ENGINE, **queue})
    away = make("away", held_prefixes={"sys": 250}, **ENGINE)
    decision = Policy.parse(["cached_prefix"]).route(REQ, [home, away])
    assert decision.names == ["away", "home"]
    (remark,) = decision.remarks
    assert remark == (
        "cached_prefix: left home (holds ~4000 tok, ttft~7000ms) for away "
        "(ttft~23750ms less its re-prefill, KV moved ~660ms)"
    )
    # re-prefill of 3750 tokens at 200/s: 18.75 s, longer than the wait: it stays
    alien = make("away", held_prefixes={"sys": 250}, **{**ENGINE, "kv_fingerprint": "y"})
    assert Policy.parse(["cached_prefix"]).route(REQ, [home, alien]).names == ["home", "away"]


def test_megabytes_read_as_people_write_them() -> None:
    assert (megabytes(52_400_000), megabytes(400_000)) == ("52 MB", "0.4 MB")
