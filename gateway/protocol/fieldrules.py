"""What a translation does with a field the API it translates to has no place for.

The rule: a field that only changes how an answer is delivered or presented (streaming
a tool's arguments, loading a tool's definition later, a cache hint, a beta flag) is
**dropped**, and the answer's ``x-shunter-dropped`` header names it; a field that changes
what the model is asked, or what its answer means, is **mapped** to its equivalent or
**refused** with a 400 naming it. A deployment's settings may drop a refused field (its
``messages_drop`` list, the ``responses.hosted_tools`` setting): those fields are
**operator** fields, dropped only where the operator said so.

Each translated API keeps one :class:`FieldRules` table of the fields it classifies;
the translation asks it, never a field name of its own. The documentation's table
(docs/translation.md) lists every row, and a test holds the two together.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

Fate = Literal["dropped", "mapped", "refused", "operator", "unused"]
"""``dropped``: delivery or presentation only, left out and reported; ``mapped``: sent as
its equivalent; ``refused``: a 400 naming it; ``operator``: refused unless the deployment's
settings drop it; ``unused``: carries nothing the target reads (a signature, a citation the
model made), left out without a word."""

Place = Literal["request", "tool", "block", "item", "header"]
"""Where the field is: the request's top level, a tool definition, a content block, an
input item (its ``type``), or a request header."""


@dataclass(frozen=True)
class FieldRule:
    """One classified field: its ``name`` at its ``place``, its fate and, in words, what
    becomes of it (the documentation's table)."""

    place: Place
    name: str
    fate: Fate
    becomes: str


class FieldRules:
    """One API's classified fields, looked up by place and name."""

    def __init__(self, api: str, rules: tuple[FieldRule, ...]) -> None:
        self.api = api
        self._rules = {(rule.place, rule.name): rule for rule in rules}

    def __iter__(self) -> Iterator[FieldRule]:
        return iter(self._rules.values())

    def of(self, place: Place, name: str) -> FieldRule | None:
        """The rule for ``name`` at ``place``, if the table classifies it."""
        return self._rules.get((place, name))

    def fate(self, place: Place, name: str) -> Fate | None:
        rule = self.of(place, name)
        return None if rule is None else rule.fate

    def dropped(self, place: Place, name: str) -> bool:
        """Whether ``name`` at ``place`` only changes delivery or presentation (left out
        and reported)."""
        return self.fate(place, name) == "dropped"
