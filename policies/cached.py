"""The ``cached_prefix`` ranker: a conversation stays where its prefix is cached, until
the wait there costs more than moving it.

Each turn of a long conversation resends the whole history; what it costs is mostly the
part the chosen engine does not hold in its KV cache. For every candidate the step finds
the longest link of the request's prefix chain the candidate holds (:mod:`policies.prefix`)
and predicts TTFT with only the uncached tokens to prefill (:func:`predict_ttft_ms`).

The *home* is the candidate holding the longest prefix of this conversation past the start
many conversations share (tools and system prompt, ``RequestFacts.prefix_shared``; holding
only that start makes no home). Between equal ones, and where none holds any, the request's
session id picks the home by rendezvous hashing; with no session id, there is none.

Leaving the home costs more than this request's TTFT elsewhere shows: the other engine
prefills again everything the home holds, and that prefill delays the sequences it is
already running. So every other candidate's key is its predicted TTFT plus that *move*:
the tokens the home holds beyond its own, at its measured prefill rate (the home's when it
has none yet; ``margin_ms`` when neither is measured, or the home holds no more than it: a
session's hashed home). Where the two engines share a KV fingerprint and moving the home's
KV is predicted faster than that prefill (:mod:`policies.kvmove`), the move is the price
instead: the gateway moves it when the request leaves. A request leaves home only when
the wait there is longer than the move: sticky until saturated, and the decision says so
(``cached_prefix: left ...``).

What many conversations share pulls none of them: for ranking, a candidate holding only
that start is counted as if it held nothing, so new conversations spread by load instead of
piling onto the engine that served the first of them. Engines (they report sequences) rank
before APIs unless ``engines_first: false``. Put ``slo`` before it, and a home predicted to
miss the target loses the request at once (spill) to an API that is predicted to meet it
(or is not measured yet).

A candidate without a predicted TTFT ranks as if it took 0 ms while it has a free slot (it
gets traffic, and so gets measured; plus its busy share of a millisecond, so that a burst
spreads), and after every measured one when it has a queue it cannot be seen to drain.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from policies.facts import Candidate
from policies.kvmove import leave_cost_ms
from policies.outcome import StepNote
from policies.predict import predict_ttft_ms, queue_wait_ms
from policies.prefix import HeldPrefix, held_prefix
from policies.rankers import rendezvous_unit
from policies.steps import Entry, FastOutcome, RouteContext, Step, StepOutcome

UNMEASURED_QUEUE_MS = 1e9
"""The key of a candidate with a queue and no rate to drain it: after every measured one."""

NOT_AN_ENGINE_MS = 1e12
"""Added to the key of a candidate that reports no sequences (an API), with
``engines_first``: after every engine that is not refusing."""


class CachedPrefixArgs(BaseModel):
    """``cached_prefix: {margin_ms: 250, engines_first: true}``: what leaving the home
    costs where no prefill rate is measured to price the move (or the home holds no more
    than the other: a session's hashed home); whether
    engines (candidates that report their sequences: local and worker engines) rank
    before the rest (APIs), which then take a request only where an earlier step (``slo``)
    put them ahead."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    margin_ms: float = Field(default=250.0, ge=0)
    engines_first: bool = True


@dataclass(frozen=True)
class _Estimate:
    held: HeldPrefix | None
    ttft_ms: float | None
    key: float

    @property
    def cached(self) -> int:
        return 0 if self.held is None else self.held.tokens


def _estimate(ctx: RouteContext, cand: Candidate) -> _Estimate:
    ttft = predict_ttft_ms(ctx.request, cand)
    held = held_prefix(ctx.request, cand)
    if ttft is not None:
        key = ttft + _shared_only_ms(ctx, cand, held)
    else:
        wait = queue_wait_ms(ctx.request, cand)
        key = UNMEASURED_QUEUE_MS if wait is None or wait > 0 else _busy_share(cand)
    return _Estimate(held, ttft, key)


def _shared_only_ms(ctx: RouteContext, cand: Candidate, held: HeldPrefix | None) -> float:
    """The prefill a candidate holding only the shared start is spared: added back to its
    key, so that the start every conversation sends does not pull new ones onto it."""
    rate = cand.live.prefill_tokens_per_s
    if held is None or held.link >= ctx.request.prefix_shared or not rate:
        return 0.0
    return 1000.0 * held.tokens / rate


def _move_ms(
    cands: list[Candidate], ests: list[_Estimate], home: int, to: int, margin: float
) -> float:
    """What moving the conversation from ``home`` to ``to`` adds to ``to``'s predicted
    TTFT: re-prefilling there what the home holds beyond what ``to`` holds, at ``to``'s
    prefill rate (else the home's), else ``margin``. Where the two engines share a KV
    fingerprint and moving that KV is predicted faster (:func:`policies.kvmove.leave_cost_ms`:
    what the gateway then does), the move replaces that prefill, which ``to``'s TTFT
    counted: the move less the prefill it spares."""
    extra = ests[home].cached - ests[to].cached
    rate = cands[to].live.prefill_tokens_per_s or cands[home].live.prefill_tokens_per_s
    if extra <= 0 or not rate:
        return margin
    again = 1000.0 * extra / rate
    moved = leave_cost_ms(cands, home, to, ests[home].cached, extra)
    own = cands[to].live.prefill_tokens_per_s
    if moved is None:
        return again
    return moved - 1000.0 * extra / own if own and ests[to].ttft_ms is not None else moved


def _busy_share(cand: Candidate) -> float:
    """The share of an unmeasured candidate's capacity in use (0..1), as milliseconds: a
    burst to unmeasured candidates spreads over them instead of filling the first."""
    live = cand.live
    capacity = live.slots_total or cand.facts.max_concurrency
    if not capacity:
        return 0.0
    busy = max(live.in_flight, live.slots_busy or 0)
    return min(busy / capacity, 1.0)


def _home(ctx: RouteContext, cands: list[Candidate], ests: list[_Estimate]) -> int | None:
    """The position of the candidate the request sticks to, if any: the one holding the
    longest prefix past the shared start; between equal ones, or where none holds any,
    where the session id hashes to."""
    shared = ctx.request.prefix_shared
    own = [e.held.chars if e.held is not None and e.held.link >= shared else 0 for e in ests]
    longest = max(own, default=0)
    holders = [i for i, chars in enumerate(own) if chars == longest]
    if longest > 0 and len(holders) == 1:
        return holders[0]
    session = ctx.request.session_id
    if not session or not holders:
        return None
    return max(holders, key=lambda i: rendezvous_unit(session, cands[i].name))


class CachedPrefix(Step):
    """Prefix-cache placement: stay where the prompt is cached until that is slower."""

    name = "cached_prefix"
    args_model = CachedPrefixArgs

    def __init__(self, args: CachedPrefixArgs | None = None) -> None:
        self.args = args or CachedPrefixArgs()

    def _keys(
        self, ctx: RouteContext, cands: list[Candidate]
    ) -> tuple[list[_Estimate], list[float], list[float], int | None, str | None]:
        """Estimates, each candidate's own key (its note's score), its key with the move
        from the home added (what ranks), the home and the remark when it is left."""
        ests = [_estimate(ctx, cand) for cand in cands]
        base = [e.key for e in ests]
        if self.args.engines_first:
            base = [k if c.live.slots_total is not None else k + NOT_AN_ENGINE_MS
                    for k, c in zip(base, cands, strict=True)]  # fmt: skip
        home = _home(ctx, cands, ests)
        if home is None:
            return ests, base, base, None, None
        margin = self.args.margin_ms
        moves = [0.0 if i == home else _move_ms(cands, ests, home, i, margin)
                 for i in range(len(cands))]  # fmt: skip
        keys = [key + move for key, move in zip(base, moves, strict=True)]
        best = min(range(len(keys)), key=lambda i: (keys[i], i))
        remark = None
        if best != home and ests[home].cached > 0:
            remark = _left(cands, ests, home, best, moves[best])
        return ests, base, keys, home, remark

    def apply(self, ctx: RouteContext, entries: list[Entry]) -> StepOutcome:
        """Append each entry's key (predicted TTFT, plus the move from the home)."""
        ests, base, keys, home, remark = self._keys(ctx, [e.candidate for e in entries])
        for i, entry in enumerate(entries):
            entry.keys.append(keys[i])
            detail = _detail(ests[i], i == home)
            entry.notes.append(StepNote(self.name, "score", detail, base[i]))
        return StepOutcome(kept=entries, remark=remark)

    def apply_fast(self, ctx: RouteContext, cands: list[Candidate]) -> FastOutcome:
        """:meth:`apply`'s keys; the home's note is kept for the candidates noted."""
        _, _, keys, home, remark = self._keys(ctx, cands)
        special: dict[int, StepNote] = {}
        if home is not None:
            est = _estimate(ctx, cands[home])
            special[home] = StepNote(self.name, "score", _detail(est, True), keys[home])
        return FastOutcome(list(range(len(cands))), keys=keys, remark=remark, special=special)

    def note(self, ctx: RouteContext, cand: Candidate) -> StepNote:
        """A score note for a candidate that is not the home (its own key: the move from
        the home ranks it, the note does not carry it)."""
        est = _estimate(ctx, cand)
        key = est.key
        if self.args.engines_first and cand.live.slots_total is None:
            key += NOT_AN_ENGINE_MS
        return StepNote(self.name, "score", _detail(est, False), key)

    def describe(self) -> str:
        """The step with its margin (and ``engines_first`` when off)."""
        text = f"{self.name}(margin_ms={self.args.margin_ms:g}"
        return text + (")" if self.args.engines_first else ",engines_first=False)")


def _left(cands: list[Candidate], ests: list[_Estimate], home: int, best: int, move: float) -> str:
    extra = ests[home].cached - ests[best].cached
    kv = leave_cost_ms(cands, home, best, ests[home].cached, extra) if extra > 0 else None
    there = (
        f"ttft~{_ms(ests[best].ttft_ms)}ms, move ~{move:.0f}ms"
        if kv is None
        else f"ttft~{_ms(ests[best].ttft_ms)}ms less its re-prefill, KV moved ~{kv:.0f}ms"
    )
    return (
        f"cached_prefix: left {cands[home].name} (holds ~{ests[home].cached} tok, "
        f"ttft~{_ms(ests[home].ttft_ms)}ms) for {cands[best].name} ({there})"
    )


def _ms(value: float | None) -> str:
    return "?" if value is None else f"{value:.0f}"


def _detail(est: _Estimate, home: bool) -> str:
    held = "none held" if est.held is None else f"holds ~{est.held.tokens} tok"
    text = f"{held} ttft~{_ms(est.ttft_ms)}ms"
    return text + " home" if home else text
