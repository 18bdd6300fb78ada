"""Gemini request bodies checked against Google's published description of the API.

``generativelanguage_v1beta.json`` holds the messages of ``google.ai.generativelanguage.v1beta``
that a ``generateContent`` or ``countTokens`` request can hold, trimmed from the protobuf
description Google publishes with its Node.js client (see its ``source``). A body passes
when every member is a field of its message (under its JSON name), of the field's type,
with at most one member of each ``oneof``; enum values must be the enum's names.
"""

from __future__ import annotations

import base64
import binascii
import json
from functools import cache
from pathlib import Path
from typing import Any

ADDITIONS = {"ThinkingConfig": {"thinkingLevel": {"type": "string"}}}
"""Fields Google documents for Gemini 3 (ai.google.dev, "Gemini thinking") that the
published description does not list yet."""

_NUMBERS = {"float", "double"}
_INTEGERS = {"int32", "int64", "uint32", "uint64", "sint32", "fixed32"}


@cache
def _types() -> dict[str, Any]:
    doc = json.loads((Path(__file__).parent / "generativelanguage_v1beta.json").read_text())
    types: dict[str, Any] = doc["types"]
    for name, fields in ADDITIONS.items():
        types[name]["fields"] = {**types[name]["fields"], **fields}
    return types


def problems(body: Any, message: str = "GenerateContentRequest") -> list[str]:
    """What in ``body`` the description does not allow (empty: it is valid)."""
    out: list[str] = []
    _message(body, message, "", out)
    return out


def _message(value: Any, name: str, at: str, out: list[str]) -> None:
    spec = _types()[name]
    if not isinstance(value, dict):
        out.append(f"{at or '<body>'}: a {name} must be an object")
        return
    for key, item in value.items():
        field = spec["fields"].get(key)
        if field is None:
            out.append(f"{at}{key}: no such field in {name}")
        elif field.get("repeated"):
            if not isinstance(item, list):
                out.append(f"{at}{key}: must be a list")
            else:
                for i, element in enumerate(item):
                    _value(element, field["type"], f"{at}{key}[{i}]", out)
        else:
            _value(item, field["type"], f"{at}{key}", out)
    for group, members in spec.get("oneofs", {}).items():
        present = [m for m in members if m in value]
        if len(present) > 1:
            out.append(f"{at}: {', '.join(present)} are one of {group}")


def _value(value: Any, kind: str, at: str, out: list[str]) -> None:
    ok = True
    if kind == "string":
        ok = isinstance(value, str)
    elif kind == "bool":
        ok = isinstance(value, bool)
    elif kind in _INTEGERS:
        ok = (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, str) and value.lstrip("-").isdigit()
        )
    elif kind in _NUMBERS:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif kind == "bytes":
        ok = isinstance(value, str) and _base64(value)
    elif kind == "google.protobuf.Struct":
        ok = isinstance(value, dict)
    elif kind == "google.protobuf.Duration":
        ok = isinstance(value, str) and value.endswith("s")
    elif kind == "google.protobuf.Value":
        ok = True
    elif "enum" in _types()[kind]:
        ok = value in _types()[kind]["enum"]
    else:
        _message(value, kind, f"{at}.", out)
    if not ok:
        out.append(f"{at}: {value!r} is not a {kind}")


def _base64(text: str) -> bool:
    try:
        base64.b64decode(text.replace("-", "+").replace("_", "/") + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return False
    return True
