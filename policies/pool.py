"""A fleet's candidates held between requests, so that filters check kinds, not deployments.

A filter's verdict on a deployment reads a few of its facts (``capable``: its features and
context length; ``fits_memory``: its memory fit; ``healthy``: its breaker state) besides the
request and the clock. Deployments with equal such facts get the same verdict, and a
fleet of a thousand has only a handful of kinds. A :class:`Pool` keeps, per filter, which
kind each candidate is, worked out on first use and kept as long as the pool: the
gateway hands the same pool to every request until a deployment's facts change. The
fast path (:mod:`policies.fast`) then asks each filter about one candidate of each kind.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from operator import attrgetter, is_

from policies.facts import Candidate

KindOf = Callable[[Candidate], Hashable]
"""What of a candidate's facts (never its live figures) a filter's verdict reads, as a
hashable value."""

_facts = attrgetter("facts")


@dataclass(frozen=True)
class Kinds:
    """Candidates grouped by a :data:`KindOf`: ``of[i]`` is candidate ``i``'s kind, and
    ``samples[k]`` the first candidate of kind ``k``."""

    of: tuple[int, ...]
    samples: tuple[Candidate, ...]


class Pool(tuple[Candidate, ...]):
    """An immutable sequence of candidates that remembers their kinds per filter.

    Build one per change of the fleet, not per request: the kinds are worked out once per
    pool and filter (a pass over the candidates), then every request reads them. A tuple,
    so that reading candidates by position costs what a tuple's does."""

    _kinds: dict[KindOf, Kinds]

    def __new__(cls, candidates: Iterable[Candidate] = ()) -> Pool:
        pool = super().__new__(cls, candidates)
        pool._kinds = {}
        return pool

    def renewed(self, candidates: Sequence[Candidate]) -> Pool:
        """This pool if ``candidates`` are its own, one for one (the same objects); else a
        pool of them, which keeps the kinds worked out here when only live figures moved
        (every candidate's facts the same object), since kinds read facts alone."""
        if len(self) != len(candidates):
            return Pool(candidates)
        if all(map(is_, self, candidates)):
            return self
        fresh = Pool(candidates)
        if all(map(is_, map(_facts, self), map(_facts, fresh))):
            fresh._kinds = self._kinds
        return fresh

    def kinds(self, kind_of: KindOf) -> Kinds:
        """The candidates grouped by ``kind_of``, worked out on the first call."""
        known = self._kinds.get(kind_of)
        if known is None:
            index: dict[Hashable, int] = {}
            samples: list[Candidate] = []
            of: list[int] = []
            for cand in self:
                key = kind_of(cand)
                at = index.get(key)
                if at is None:
                    at = index[key] = len(samples)
                    samples.append(cand)
                of.append(at)
            known = self._kinds[kind_of] = Kinds(tuple(of), tuple(samples))
        return known
