"""Which sequence a prompt goes to, and what the sequence's KV keeps of it.

The scheduler thread asks :class:`Placement` for a free sequence per admitted job: a
conversation goes back to the sequence holding its own earlier turns, others where the least
cached KV is lost and the running sequences stay contiguous; a neighbour's stream is copied
over when it holds a longer prefix of the prompt. :func:`check_prompt` refuses what cannot be
placed at all.
"""

from __future__ import annotations

from typing import Any

from backends.llamacpp.held import HeldChains
from backends.llamacpp.sequences import Seq, Ticket
from gateway.errors import ContextLengthExceededError, InvalidRequestError

MIN_COPY_GAIN = 16
"""Prefix tokens another sequence must hold beyond the chosen one's own cache before its whole
KV stream is copied over (a cross-stream copy moves the full stream buffer, which costs about
as much as prefilling a few tokens); at least 1/256 of the context per sequence."""


class Placement:
    """Places prompts in the context's sequences (``seqs``, shared with the scheduler) and
    trims their KV (``mem``: the context's llama.cpp memory) and held prefix links."""

    def __init__(
        self,
        seqs: list[Seq],
        mem: Any,
        held: HeldChains,
        *,
        prefix_cache: bool,
        n_ctx_seq: int,
    ) -> None:
        self._seqs = seqs
        self._mem = mem
        self._held = held
        self._prefix_cache = prefix_cache
        self._min_copy_gain = max(MIN_COPY_GAIN, n_ctx_seq // 256)

    def match(self, tickets: list[Ticket]) -> list[tuple[Ticket, Seq | None]]:
        """Pair tickets with sequences when this round fills every free sequence.

        Then which sequences run is settled (all of them), so each prompt goes where its
        longest cached prefix is, best pairs first; otherwise each is placed on its own by
        :meth:`place`, which keeps running sequences contiguous.
        """
        for ticket in [t for t in tickets if t.job.cancelled.is_set()]:
            ticket.chain.free()
            tickets.remove(ticket)
        free = [s for s in self._seqs if s.task is None]
        if not self._prefix_cache or len(tickets) < max(2, len(free)):
            return [(t, None) for t in tickets]
        pairs = sorted(
            ((common_prefix(s.tokens, t.job.prompt_tokens), i, s.id)
             for i, t in enumerate(tickets) for s in free),
            reverse=True,
        )  # fmt: skip
        chosen: dict[int, Seq] = {}
        taken: set[int] = set()
        for _, i, seq_id in pairs:
            if i not in chosen and seq_id not in taken:
                chosen[i] = self._seqs[seq_id]
                taken.add(seq_id)
        return [(t, chosen[i]) for i, t in enumerate(tickets)]

    def place(
        self, prompt: list[int], seq: Seq | None = None, own: set[int] | None = None
    ) -> tuple[Seq, int]:
        """A free sequence for ``prompt`` (``seq`` if given) and how many prompt tokens its
        KV already holds.

        A conversation (``own``: the sequences holding its own part, past the start every
        conversation shares) goes to one of its own, else to the one whose KV loses the
        fewest tokens: another conversation's KV stays for its next turn (losing it costs a
        whole prefill) while an emptier sequence serves. Then, as llama.cpp computes only
        consecutive sequence ids in one pass when streams are separate, the free sequence
        that keeps the running ones contiguous; then the longest cached prefix. When another
        sequence (running or idle) holds a longer prefix of the prompt, its stream is copied
        over first.
        """
        import llama_cpp

        busy = {s.id for s in self._seqs if s.task is not None}
        common = {s.id: common_prefix(s.tokens, prompt) if self._prefix_cache else 0
                  for s in self._seqs}  # fmt: skip
        if seq is None:
            free = [s for s in self._seqs if s.task is None]
            seq = min(free, key=lambda s: (
                0 if own is None else (s.id not in own, len(s.tokens) - common[s.id]),
                runs(busy | {s.id}),
                -common[s.id],
                s.id,
            ))  # fmt: skip
        shared = common[seq.id]
        donor = max(self._seqs, key=lambda s: common[s.id])
        if donor is not seq and common[donor.id] >= shared + self._min_copy_gain:
            # the whole stream is copied at the start of the next decode, before that decode
            # writes anything; the tail past the shared prefix is dropped below
            llama_cpp.llama_memory_seq_cp(self._mem, donor.id, seq.id, -1, -1)
            seq.tokens = list(donor.tokens)
            self._held.copy(donor.id, seq.id)
            shared = common[donor.id]
        keep = max(0, min(shared, len(prompt) - 1))  # the last prompt token gives the logits
        self.trim(seq, keep)
        return seq, keep

    def trim(self, seq: Seq, keep: int) -> None:
        import llama_cpp

        if keep >= len(seq.tokens) and keep > 0:
            return
        if keep == 0 or not llama_cpp.llama_memory_seq_rm(self._mem, seq.id, keep, -1):
            llama_cpp.llama_memory_seq_rm(self._mem, seq.id, -1, -1)
            keep = 0
        del seq.tokens[keep:]
        self._held.trim(seq.id, keep)


def check_prompt(prompt: list[int], n_vocab: int, n_ctx_seq: int) -> None:
    """Refuse a prompt the scheduler cannot place: no tokens (nothing to decode, no logits to
    sample from), no room left to generate in a sequence, or ids outside the vocabulary (one
    bad id fails the whole batch's decode, neighbours included)."""
    if not prompt:
        raise InvalidRequestError("the prompt has no tokens", param="prompt")
    if len(prompt) >= n_ctx_seq:
        raise ContextLengthExceededError(
            f"This model's maximum context length is {n_ctx_seq} tokens. "
            f"However, the prompt has {len(prompt)} tokens.",
            param="prompt",
        )
    if min(prompt) < 0 or max(prompt) >= n_vocab:
        raise InvalidRequestError("the prompt has token ids outside the vocabulary", param="prompt")


def runs(ids: set[int]) -> int:
    """How many runs of consecutive ids ``ids`` makes: the passes one decode step needs."""
    return sum(1 for i in ids if i - 1 not in ids)


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the common prefix, by bisection over slice comparisons (done in C)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    low, high = 0, n  # a[:low] == b[:low] and a[:high] != b[:high]
    while high - low > 1:
        mid = (low + high) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid
    return low
