"""A JSON request body kept as the client sent it, with its top-level members located.

A request forwarded to an upstream that speaks the client's own API goes up byte for
byte: only the members the gateway must change (``model``; ``max_tokens`` on a token
count) are spliced, everything else (key order, spacing, escapes, numbers, fields this
gateway has never heard of) stays as it came. One pass of the standard decoder reads the
top-level object and where each member's value lies.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.errors import InvalidRequestError

_DECODER = json.JSONDecoder()
_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
"""A ``\\uD800``-``\\uDFFF`` escape: Python's decoder takes a lone one, which no UTF-8
encoder (nor an upstream) takes."""
_SPACE = " \t\n\r"


@dataclass(frozen=True)
class Member:
    """Where one top-level member lies in the text: from its key to the end of its value."""

    start: int
    value_start: int
    end: int


@dataclass(frozen=True)
class RawBody:
    """A top-level JSON object: its text, its decoded members and where each lies."""

    text: str
    data: dict[str, Any]
    members: dict[str, Member]

    @classmethod
    def read(cls, raw: bytes) -> RawBody:
        """Decode ``raw`` (UTF-8 JSON, an object at the top); a 400 when it is not one."""
        try:
            text = raw.decode("utf-8")
            data, members = _members(text)
            if _SURROGATE.search(text) is not None:
                orjson.loads(raw)  # a surrogate escape must be half of a pair
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            raise InvalidRequestError(f"The body is not a JSON object: {exc}") from None
        return cls(text, data, members)

    def spliced(self, changes: dict[str, Any], drop: tuple[str, ...] = ()) -> bytes:
        """The body as sent, with each member in ``changes`` set to its value (added at
        the end when absent) and the members in ``drop`` taken out."""
        edits: list[tuple[int, int, str]] = []
        added: list[str] = []
        for key, value in changes.items():
            encoded = json.dumps(value, ensure_ascii=False)
            member = self.members.get(key)
            if member is None:
                added.append(f"{json.dumps(key)}:{encoded}")
            else:
                edits.append((member.value_start, member.end, encoded))
        for key in drop:
            member = self.members.get(key)
            if member is not None:
                edits.append((*self._span_with_comma(member), ""))
        text = self.text
        for start, end, new in sorted(edits, reverse=True):
            text = text[:start] + new + text[end:]
        if added:
            close = text.rstrip().rfind("}")
            inside = text[:close].rstrip()
            joiner = "" if inside.endswith("{") else ","
            text = inside + joiner + ",".join(added) + text[close:]
        return text.encode("utf-8")

    def _span_with_comma(self, member: Member) -> tuple[int, int]:
        """A member's span with one of the commas beside it, so the rest stays valid."""
        after = _skip(self.text, member.end)
        if self.text[after] == ",":
            return member.start, _skip(self.text, after + 1)
        before = member.start - 1
        while before > 0 and self.text[before] in _SPACE:
            before -= 1
        if self.text[before] == ",":
            return before, member.end
        return member.start, member.end


def _skip(text: str, at: int) -> int:
    while at < len(text) and text[at] in _SPACE:
        at += 1
    return at


def _members(text: str) -> tuple[dict[str, Any], dict[str, Member]]:
    """The top-level object's members, decoded, and where each lies in ``text``."""
    at = _skip(text, 0)
    if text[at : at + 1] != "{":
        raise ValueError("the top level is not an object")
    data: dict[str, Any] = {}
    members: dict[str, Member] = {}
    at = _skip(text, at + 1)
    if text[at : at + 1] == "}":
        return data, members
    while True:
        start = at
        key, at = _DECODER.raw_decode(text, at)
        if not isinstance(key, str):
            raise ValueError(f"a key that is not a string at {start}")
        at = _skip(text, at)
        if text[at : at + 1] != ":":
            raise ValueError(f"':' expected at {at}")
        value_start = _skip(text, at + 1)
        value, at = _DECODER.raw_decode(text, value_start)
        data[key] = value
        members[key] = Member(start, value_start, at)
        at = _skip(text, at)
        sep = text[at : at + 1]
        at = _skip(text, at + 1)
        if sep == "}":
            if text[at:]:
                raise ValueError(f"extra data after the object at {at}")
            return data, members
        if sep != ",":
            raise ValueError(f"',' or '}}' expected at {at - 1}")
