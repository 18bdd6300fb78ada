"""Gemini's ``Schema`` (an OpenAPI 3.0 subset: ``parameters``, ``responseSchema``) as the
JSON Schema chat upstreams read.

``type`` names are upper-case there (``STRING``, ``OBJECT``) and lower-case here;
``nullable: true`` adds ``"null"`` to the type; counts that Google's JSON writes as strings
(``"maxItems": "3"``, its int64s) become integers; ``example`` becomes ``examples``;
``propertyOrdering`` (an order hint that JSON Schema has no keyword for) is left out.
``properties``, ``items`` and ``anyOf`` are read the same way, deep. A schema given as
``parametersJsonSchema`` / ``responseJsonSchema`` is JSON Schema already and goes as it came.
"""

from __future__ import annotations

from typing import Any

from gateway.errors import InvalidRequestError

_TYPES = frozenset({"STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT", "NULL"})
_COUNTS = frozenset(
    {"minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties"}
)
_LEFT_OUT = frozenset({"propertyOrdering", "property_ordering"})
_SNAKE = {
    "any_of": "anyOf",
    "min_items": "minItems",
    "max_items": "maxItems",
    "min_length": "minLength",
    "max_length": "maxLength",
    "min_properties": "minProperties",
    "max_properties": "maxProperties",
}
MAX_DEPTH = 64  # deeper than any real tool's arguments; a bound on the walk


def json_schema(schema: Any, param: str, depth: int = 0) -> dict[str, Any]:
    """The JSON Schema for Gemini's ``schema`` at ``param`` (a 400 naming what is wrong)."""
    if not isinstance(schema, dict):
        raise InvalidRequestError(f"{param} must be an object (a Schema)", param=param)
    if depth > MAX_DEPTH:
        raise InvalidRequestError(f"{param} is nested too deeply", param=param)
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _LEFT_OUT or key == "nullable":
            continue
        name = _SNAKE.get(str(key), str(key))
        out[name if name != "example" else "examples"] = _keyword(
            name, value, f"{param}.{key}", depth
        )
    if schema.get("nullable") is True:
        kind = out.get("type")
        if isinstance(kind, str):
            out["type"] = [kind, "null"]
        elif "anyOf" in out:
            out["anyOf"] = [*out["anyOf"], {"type": "null"}]
    return out


def _keyword(name: str, value: Any, where: str, depth: int) -> Any:
    """The JSON Schema value of one keyword."""
    if name == "type":
        return _type(value, where)
    if name in _COUNTS:
        return _count(value, where)
    if name == "properties":
        return _properties(value, where, depth)
    if name == "items":
        return json_schema(value, where, depth + 1)
    if name == "anyOf":
        if not isinstance(value, list):
            raise InvalidRequestError(f"{where} must be a list of schemas", param=where)
        return [json_schema(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value)]
    if name == "example":
        return [value]
    return value


def _type(value: Any, param: str) -> str:
    if not isinstance(value, str) or value.upper() not in _TYPES:
        raise InvalidRequestError(
            f"{param}: {value!r} is not a type (one of {', '.join(sorted(_TYPES))})",
            param=param,
        )
    return value.lower()


def _count(value: Any, param: str) -> int:
    if isinstance(value, str) and value.isdigit():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise InvalidRequestError(f"{param} must be a count (a whole number)", param=param)


def _properties(value: Any, param: str, depth: int) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidRequestError(f"{param} must map names to schemas", param=param)
    return {name: json_schema(v, f"{param}.{name}", depth + 1) for name, v in value.items()}
