"""The JSON Schema of a tool's arguments, checked against what the meta-schema allows.

A tool's ``parameters`` (chat, Responses) or ``input_schema`` (Messages) is handed to
upstreams and grammar compilers as it is; one they cannot read (``minLength: -3``,
``required: "a"``, ``type: "text"``) fails there later, or not at all, so the request is
refused here, naming the keyword. The check covers the keywords of drafts 4 to 2020-12
whose values have a fixed type or range; keywords it does not know are left alone (as
the meta-schema does). A ``pattern`` need not be anchored: JSON Schema matches it anywhere
in the string. The walk is linear in the schema's size and stops at :data:`MAX_NODES`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any, TypeGuard

from pydantic import AfterValidator, JsonValue

MAX_NODES = 20_000

_TYPES = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})
_COUNTS = frozenset(
    {
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "minContains",
        "maxContains",
    }
)
_NUMBERS = frozenset({"minimum", "maximum"})
_STRINGS = frozenset({"pattern", "format", "title", "description", "$ref", "$id", "$schema"})
_BOOLEANS = frozenset({"uniqueItems"})
_ONE_SCHEMA = frozenset(
    {
        "additionalProperties",
        "additionalItems",
        "not",
        "if",
        "then",
        "else",
        "contains",
        "propertyNames",
        "unevaluatedItems",
        "unevaluatedProperties",
    }
)
_SCHEMA_LISTS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_SCHEMA_MAPS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)


class SchemaProblem(ValueError):
    """What is wrong with a schema, and where (a JSON pointer into it)."""

    def __init__(self, where: str, what: str) -> None:
        super().__init__(f"not a valid JSON Schema: {what} at '{where or '/'}'")


def check_schema(schema: Any) -> None:
    """Raise :class:`SchemaProblem` for the first keyword whose value the JSON Schema
    meta-schema does not allow (a schema is an object or a boolean), a bound past its
    other bound (``minimum`` above ``maximum``: no value fits), or a local ``$ref`` that
    points at nothing or only at ``$ref`` s back to itself (no schema to expand)."""
    budget = [MAX_NODES]
    _check(schema, "", budget)
    _check_refs(schema, "", schema, [MAX_NODES])


def _check(schema: Any, where: str, budget: list[int]) -> None:
    budget[0] -= 1
    if budget[0] < 0:
        raise SchemaProblem(where, f"more than {MAX_NODES} subschemas")
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise SchemaProblem(where, "a schema must be an object or a boolean")
    for keyword, value in schema.items():
        what = _keyword_problem(keyword, value)
        if what is not None:
            raise SchemaProblem(f"{where}/{keyword}", what)
    for low, high in _BOUNDS:
        lowest, highest = schema.get(low), schema.get(high)
        if _is_number(lowest) and _is_number(highest) and lowest > highest:
            raise SchemaProblem(f"{where}/{low}", f"{low} is greater than {high}")
    for path, inner in _subschemas(schema):
        _check(inner, f"{where}/{path}", budget)


_BOUNDS = (
    ("minimum", "maximum"),
    ("minLength", "maxLength"),
    ("minItems", "maxItems"),
    ("minProperties", "maxProperties"),
    ("minContains", "maxContains"),
)


def _check_refs(schema: Any, where: str, root: Any, budget: list[int]) -> None:
    """Each local ``$ref`` (``#``, ``#/$defs/...``) must lead, through any ``$ref`` s it
    points at, to a schema of its own (a remote one is left to whoever fetches it)."""
    budget[0] -= 1
    if budget[0] < 0 or not isinstance(schema, dict):
        return
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#"):
        _follow(ref, f"{where}/$ref", root)
    for path, inner in _subschemas(schema):
        _check_refs(inner, f"{where}/{path}", root, budget)


def _follow(ref: str, where: str, root: Any) -> None:
    seen: set[str] = set()
    target: Any = {"$ref": ref}
    while isinstance(target, dict) and isinstance(target.get("$ref"), str):
        ref = target["$ref"]
        if not ref.startswith("#"):
            return
        if ref in seen:
            raise SchemaProblem(where, f"$ref '{ref}' leads back to itself through $refs only")
        seen.add(ref)
        target = _pointed(root, ref)
        if target is None:
            raise SchemaProblem(where, f"$ref '{ref}' points at nothing in the schema")


def _pointed(root: Any, ref: str) -> Any:
    """What the JSON pointer of a local ``$ref`` points at (None when nothing)."""
    node = root
    for raw in ref[1:].split("/")[1:]:
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _keyword_problem(keyword: str, value: Any) -> str | None:
    """Why ``value`` is not allowed for ``keyword`` (None when it is, or unknown)."""
    if keyword == "type":
        return _type_problem(value)
    if keyword in _COUNTS:
        return None if _is_count(value) else f"{keyword} must be a non-negative integer"
    if keyword in _NUMBERS:
        return None if _is_number(value) else f"{keyword} must be a number"
    if keyword in ("exclusiveMinimum", "exclusiveMaximum"):
        ok = _is_number(value) or isinstance(value, bool)  # a boolean in draft 4
        return None if ok else f"{keyword} must be a number"
    if keyword == "multipleOf":
        ok = _is_number(value) and value > 0
        return None if ok else "multipleOf must be a number greater than 0"
    if keyword in _STRINGS:
        return None if isinstance(value, str) else f"{keyword} must be a string"
    if keyword in _BOOLEANS:
        return None if isinstance(value, bool) else f"{keyword} must be a boolean"
    if keyword == "required":
        return _names_problem(keyword, value)
    if keyword == "enum":
        return None if isinstance(value, list) else "enum must be an array"
    if keyword in _SCHEMA_LISTS:
        ok = isinstance(value, list) and (bool(value) or keyword == "prefixItems")
        return None if ok else f"{keyword} must be a non-empty array of schemas"
    if keyword in _SCHEMA_MAPS:
        return None if isinstance(value, dict) else f"{keyword} must be an object of schemas"
    if keyword == "dependentRequired":
        if not isinstance(value, dict):
            return "dependentRequired must be an object"
        return next((p for p in (_names_problem(keyword, v) for v in value.values()) if p), None)
    return None


def _subschemas(schema: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    for keyword, value in schema.items():
        if keyword in _ONE_SCHEMA:
            yield keyword, value
        elif keyword in _SCHEMA_LISTS or (keyword == "items" and isinstance(value, list)):
            yield from ((f"{keyword}/{i}", inner) for i, inner in enumerate(value))
        elif keyword == "items":
            yield keyword, value
        elif keyword in _SCHEMA_MAPS:
            yield from ((f"{keyword}/{_escape(name)}", inner) for name, inner in value.items())
        elif keyword == "dependencies" and isinstance(value, dict):  # draft 4-7
            for name, inner in value.items():
                if not isinstance(inner, list):
                    yield f"{keyword}/{_escape(name)}", inner


def _type_problem(value: Any) -> str | None:
    names = value if isinstance(value, list) else [value]
    if not names or any(not isinstance(n, str) or n not in _TYPES for n in names):
        return f"type must be one of {', '.join(sorted(_TYPES))} (or a list of them)"
    if len(set(names)) != len(names):
        return "type must not repeat a name"
    return None


def _names_problem(keyword: str, value: Any) -> str | None:
    if not isinstance(value, list) or any(not isinstance(n, str) for n in value):
        return f"{keyword} must be an array of strings"
    if len(set(value)) != len(value):
        return f"{keyword} must not repeat a name"
    return None


def _is_count(value: Any) -> bool:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def checked_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` once :func:`check_schema` passed (a pydantic after-validator)."""
    check_schema(schema)
    return schema


ToolSchema = Annotated[dict[str, JsonValue], AfterValidator(checked_schema)]
"""A request field holding a tool's JSON Schema, refused when the meta-schema would be."""
