"""The key a misspelt config key was meant to be: ``n_ctxx`` -> ``n_ctx``.

The schema's own JSON Schema says which keys each mapping takes; a location as pydantic
reports it (discriminator values included, e.g. ``deployments.0.llamacpp.n_ctxx``) is
followed down it to the mapping that holds the unknown key. Built only when a config has
an unknown key, so a valid config never pays for it.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

Node = Mapping[str, Any]


def did_you_mean(name: str, known: Sequence[str]) -> str:
    """``"; did you mean 'x'?"`` for the closest of ``known``, or ``""`` when none is close."""
    close = difflib.get_close_matches(name, known, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


class KeyHints:
    """Closest allowed keys for unknown ones, read from ``model``'s JSON Schema."""

    def __init__(self, model: type[BaseModel]) -> None:
        self._schema: Node = model.model_json_schema()
        self._defs: Node = self._schema.get("$defs", {})

    def hint(self, loc: Sequence[int | str]) -> str:
        """The ``did you mean`` suffix for the unknown key at the end of ``loc``."""
        if not loc or not isinstance(loc[-1], str):
            return ""
        node: Node | None = self._schema
        for part in loc[:-1]:
            node = self._child(node, part) if node is not None else None
        return did_you_mean(loc[-1], self._keys(node)) if node is not None else ""

    def _child(self, node: Node, part: int | str) -> Node | None:
        node = self._resolve(node)
        if isinstance(part, int):
            items = node.get("items")
            return items if isinstance(items, Mapping) else None
        mapping = node.get("discriminator", {}).get("mapping", {})
        if part in mapping:  # pydantic names the member a tag chose by the tag's value
            return self._ref(mapping[part])
        for member in self._members(node):
            properties = member.get("properties", {})
            if part in properties:
                return properties[part]  # type: ignore[no-any-return]
            extra = member.get("additionalProperties")
            if isinstance(extra, Mapping):
                return extra
        # a union told apart by a function names its member by a tag the schema lacks
        return node if len(self._members(node)) > 1 else None

    def _keys(self, node: Node) -> list[str]:
        return [key for member in self._members(node) for key in member.get("properties", {})]

    def _members(self, node: Node) -> list[Node]:
        """The object schemas ``node`` may be: itself, or each of its union's members."""
        node = self._resolve(node)
        union = node.get("anyOf") or node.get("oneOf")
        if not union:
            return [node]
        return [self._resolve(member) for member in union]

    def _resolve(self, node: Node) -> Node:
        ref = node.get("$ref")
        return self._ref(ref) if isinstance(ref, str) else node

    def _ref(self, ref: str) -> Node:
        resolved = self._defs.get(ref.rsplit("/", 1)[-1], {})
        return resolved if isinstance(resolved, Mapping) else {}
