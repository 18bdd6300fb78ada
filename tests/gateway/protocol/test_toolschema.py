"""A tool's JSON Schema against what the meta-schema allows, keyword by keyword."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.protocol.toolschema import MAX_NODES, SchemaProblem, check_schema

VALID: list[Any] = [
    True,
    {},
    {"type": "object", "properties": {"code": {"type": "string", "pattern": "[A-Z]{3}"}}},
    {"type": ["string", "null"], "minLength": 0, "maxLength": 5.0},
    {"type": "array", "items": [{"type": "string"}, False], "additionalItems": True},
    {"$defs": {"n": {"type": "number", "multipleOf": 0.5}}, "$ref": "#/$defs/n"},
    {"exclusiveMinimum": True, "minimum": 1},  # draft 4
    {"anyOf": [{"const": 1}, {"enum": [2, "x"]}], "x-vendor": {"minLength": -1}},
    {"dependencies": {"a": ["b"], "c": {"required": ["d"]}}},
]

INVALID: list[tuple[Any, str]] = [
    ({"type": "object", "properties": {"s": {"type": "string", "minLength": -3}}}, "minLength"),
    ({"type": "text"}, "/type"),
    ({"type": ["string", "string"]}, "/type"),
    ({"required": "a"}, "/required"),
    ({"required": ["a", "a"]}, "/required"),
    ({"maxItems": 1.5}, "/maxItems"),
    ({"minimum": "3"}, "/minimum"),
    ({"multipleOf": 0}, "/multipleOf"),
    ({"pattern": 3}, "/pattern"),
    ({"properties": []}, "/properties"),
    ({"anyOf": []}, "/anyOf"),
    ({"items": {"items": {"uniqueItems": "yes"}}}, "/items/items/uniqueItems"),
    ({"properties": {"a/b": 5}}, "/properties/a~1b"),
    ({"enum": "a"}, "/enum"),
]


@pytest.mark.parametrize("schema", VALID)
def test_valid_schemas_pass(schema: Any) -> None:
    check_schema(schema)


@pytest.mark.parametrize(("schema", "where"), INVALID)
def test_invalid_schemas_name_the_keyword(schema: Any, where: str) -> None:
    with pytest.raises(SchemaProblem, match=where):
        check_schema(schema)


def test_the_walk_is_bounded() -> None:
    wide = {"properties": {f"p{i}": {"type": "string"} for i in range(MAX_NODES + 1)}}
    with pytest.raises(SchemaProblem, match="subschemas"):
        check_schema(wide)
