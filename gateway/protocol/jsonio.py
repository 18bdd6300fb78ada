"""JSON in and out of the wire models at a cost proportional to the bytes.

A request body is mostly one long string (the conversation). Pydantic's JSON-mode
validation walks it at 1.3-1.9 ms per MB and ``json.dumps`` re-encodes it at up to 8;
msgspec decodes a megabyte in about 0.4 ms, and validating the decoded objects costs
nothing per byte (a ``str`` is checked, not copied). Small bodies keep pydantic's single
pass, which is as fast there and needs no intermediate objects.

Encoding a freshly decoded megabyte (the upstream body) costs msgspec 0.7 ms of ASCII text
and orjson 0.2 (it scans ASCII strings for escapes many bytes at a time); text with any
non-ASCII character costs both about 1.3-1.6 ms, most of it CPython's own conversion of
the string to UTF-8. orjson encodes; what it refuses (integers past 64 bits) msgspec does.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
import orjson
from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)

_LARGE = 16 * 1024  # bytes: below this, one pass in pydantic-core is as fast
_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode


def validate_json(model: type[M], data: bytes) -> M:
    """``model.model_validate_json(data)``, with the same errors, faster on large bodies."""
    if len(data) < _LARGE:
        return model.model_validate_json(data)
    try:
        decoded = _decode(data)
    except (msgspec.DecodeError, RecursionError):
        # what msgspec refuses, pydantic parses again: its own error (or its looser
        # reading, e.g. NaN) is the answer, as for a small body; nesting too deep for
        # msgspec is past pydantic's own depth limit, which stops early with its error
        return model.model_validate_json(data)
    return model.model_validate(decoded)


def encode(value: Any) -> bytes:
    """Compact UTF-8 JSON of plain data (dicts, lists, strings, numbers, booleans, None)."""
    try:
        return orjson.dumps(value)
    except TypeError:  # orjson's own error type derives from it
        return _encode(value)


def to_json(model: BaseModel) -> bytes:
    """A model as JSON bytes: ``model_dump_json`` without the ``str`` round trip."""
    return model.__pydantic_serializer__.to_json(model)
