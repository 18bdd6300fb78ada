"""Whether moving a conversation's KV cache beats prefilling it again: the prediction.

A request placed on an engine (the *target*) that holds less of its prefix than another
candidate (the *source*) with the same KV fingerprint can be served from the source's KV
moved over instead of prefilling the difference again. The move costs its bytes (the
tokens the source holds at the KV bytes per token) over the link rate, plus the target's
import of them; the re-prefill costs the tokens the move would spare at the target's
measured prefill rate (the source's where the target has none yet). Moving pays when it is
faster, and only for a difference of at least :data:`MIN_MOVE_TOKENS` tokens: below that
the re-prefill is cheap and a move would only add work to both engines.

Rates are learned per target from the moves done (``LiveFigures.kv_move_bytes_per_s``,
``kv_import_bytes_per_s``), else from any candidate's moves, else the defaults below;
the bytes per token from moves done, else the engine's model shape.

Pure: no I/O. The gateway's dispatcher moves when :attr:`MoveEstimate.pays`, and the
``cached_prefix`` ranker prices leaving a conversation's home with :func:`leave_cost_ms`,
so that the ranking and the move agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from policies.facts import Candidate, RequestFacts
from policies.prefix import HeldPrefix, held_prefix

MIN_MOVE_TOKENS = 256
"""The fewest tokens a move must spare the target: a smaller re-prefill is cheap."""

DEFAULT_LINK_BYTES_PER_S = 100e6
"""The transfer rate assumed before a move into a deployment was measured (about a
gigabit network; loopback moves run faster and are learned after the first)."""

DEFAULT_IMPORT_BYTES_PER_S = 300e6
"""The import rate (receiving buffer to sequence) assumed before one was measured."""

MOVE_FIXED_MS = 20.0
"""What every move costs besides its bytes: two requests and a turn of each scheduler."""


@dataclass(frozen=True)
class MoveEstimate:
    """A move of one conversation's KV from ``source`` to ``target`` (positions in the
    candidates given), predicted.

    ``link``: the source's deepest held link of the request's chain (what is asked for);
    ``tokens``: what the source holds of the prompt (what travels); ``spared``: the tokens
    the target would otherwise prefill again; ``reprefill_ms``: their prefill there
    (``None``: no prefill rate measured)."""

    source: int
    target: int
    source_name: str
    link: str
    tokens: int
    spared: int
    n_bytes: int
    move_ms: float
    reprefill_ms: float | None
    min_tokens: int = MIN_MOVE_TOKENS

    @property
    def pays(self) -> bool:
        """Whether moving is predicted faster than prefilling again (and worth it)."""
        return self.why_not is None

    @property
    def why_not(self) -> str | None:
        """Why the move is not made, in words; ``None`` when it pays."""
        if self.spared < self.min_tokens:
            return f"re-prefill of {self.spared} tokens is cheap (< {self.min_tokens})"
        if self.reprefill_ms is None:
            return "no prefill rate measured to compare with"
        if self.move_ms >= self.reprefill_ms:
            return (
                f"predicted {self.move_ms / 1000:.2f} s for {megabytes(self.n_bytes)} from "
                f"{self.source_name} against re-prefill {self.reprefill_ms / 1000:.2f} s"
            )
        return None


def megabytes(n_bytes: int) -> str:
    """``n_bytes`` for people: ``52 MB``, ``0.4 MB``."""
    mb = n_bytes / 1e6
    return f"{mb:.0f} MB" if mb >= 10 else f"{mb:.1f} MB"


def movable(source: Candidate, target: Candidate) -> bool:
    """Whether a KV state moves from ``source`` to ``target``: equal fingerprints."""
    fingerprint = source.live.kv_fingerprint
    return fingerprint is not None and fingerprint == target.live.kv_fingerprint


def bytes_per_token(source: Candidate, target: Candidate) -> float | None:
    """One token's KV state in bytes: the target's figure, else the source's."""
    return target.live.kv_bytes_per_token or source.live.kv_bytes_per_token


def transfer_ms(n_bytes: int, target: Candidate, cands: Sequence[Candidate] = ()) -> float:
    """Predicted time to move ``n_bytes`` into ``target``: the bytes at the link rate and
    at the import rate learned for it (else for any of ``cands``, else the defaults), and
    the fixed cost of a move."""
    link = target.live.kv_move_bytes_per_s or _overall(cands, "kv_move_bytes_per_s")
    taking = target.live.kv_import_bytes_per_s or _overall(cands, "kv_import_bytes_per_s")
    link = link or DEFAULT_LINK_BYTES_PER_S
    taking = taking or DEFAULT_IMPORT_BYTES_PER_S
    return MOVE_FIXED_MS + 1000.0 * n_bytes * (1.0 / link + 1.0 / taking)


def _overall(cands: Sequence[Candidate], name: str) -> float | None:
    """The mean of a rate learned on any candidate (moves into any of them)."""
    values: list[float] = [v for c in cands if (v := getattr(c.live, name))]
    return sum(values) / len(values) if values else None


def reprefill_ms(spared: int, source: Candidate, target: Candidate) -> float | None:
    """Prefilling ``spared`` tokens on the target, at its prefill rate (else the source's)."""
    rate = target.live.prefill_tokens_per_s or source.live.prefill_tokens_per_s
    return 1000.0 * spared / rate if rate else None


def best_source(
    request: RequestFacts, cands: Sequence[Candidate], target: int
) -> tuple[int, HeldPrefix] | None:
    """The candidate a move to ``target`` would come from: of those with its fingerprint,
    the one holding the most of the request's prefix beyond what the target holds, and
    more than the start many conversations share (``RequestFacts.prefix_shared``: the
    target takes that from the next conversation that brings it)."""
    goal = cands[target]
    own = held_prefix(request, goal)
    floor = 0 if own is None else own.tokens
    best: tuple[int, HeldPrefix] | None = None
    for i, cand in enumerate(cands):
        if i == target or not movable(cand, goal):
            continue
        held = held_prefix(request, cand)
        if held is None or held.tokens <= floor or held.link < request.prefix_shared:
            continue
        if best is None or held.tokens > best[1].tokens:
            best = i, held
    return best


def predict_move(
    request: RequestFacts,
    cands: Sequence[Candidate],
    target: int,
    min_tokens: int = MIN_MOVE_TOKENS,
) -> MoveEstimate | None:
    """The move to ``target`` that would serve this request (see the module docstring);
    ``None`` where no candidate with its fingerprint holds more of the prefix, or the KV
    size per token is unknown."""
    found = best_source(request, cands, target)
    if found is None:
        return None
    index, held = found
    source, goal = cands[index], cands[target]
    per_token = bytes_per_token(source, goal)
    if not per_token:
        return None
    own = held_prefix(request, goal)
    spared = held.tokens - (0 if own is None else own.tokens)
    n_bytes = int(held.tokens * per_token)
    link = request.prefix_chain[held.link][0]
    return MoveEstimate(
        source=index,
        target=target,
        source_name=source.name,
        link=link,
        tokens=held.tokens,
        spared=spared,
        n_bytes=n_bytes,
        move_ms=transfer_ms(n_bytes, goal, cands),
        reprefill_ms=reprefill_ms(spared, source, goal),
        min_tokens=min_tokens,
    )


def leave_cost_ms(
    cands: Sequence[Candidate], home: int, to: int, held: int, spared: int
) -> float | None:
    """What leaving ``home`` (holding ``held`` tokens of the prompt) for ``to`` costs when
    the conversation's KV moves with it (``spared`` tokens ``to`` need not prefill): the
    predicted move where it pays, else ``None`` (the caller prices the re-prefill)."""
    source, goal = cands[home], cands[to]
    if spared < MIN_MOVE_TOKENS or not movable(source, goal):
        return None
    per_token = bytes_per_token(source, goal)
    again = reprefill_ms(spared, source, goal)
    if not per_token or again is None:
        return None
    move = transfer_ms(int(held * per_token), goal, cands)
    return move if move < again else None
