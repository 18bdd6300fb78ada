"""OpenAI's OpenAPI description of the operations the gateway serves, as JSON Schema.

``openai-gateway-subset.json`` is OpenAI's published OpenAPI document (``openapi.json`` of
its ``openai-openapi`` repository, ``info.version`` 2.3.0, OpenAPI 3.1.0, MIT as its
``info.license`` states) cut down to chat, completions, embeddings, models and responses,
with every schema they reference unchanged.

Two adjustments are made for validation, both in :func:`load_document`:

* The document still marks schemas with OpenAPI 3.0's ``nullable: true``, which a JSON Schema
  2020-12 validator ignores; each becomes ``anyOf: [schema, {type: null}]``.
* ``CreateCompletionStreamResponse`` is added: the legacy completions schema is shared by
  whole answers and stream chunks, and says ``finish_reason`` is never ``null``, yet OpenAI
  sends ``null`` in every chunk but the last (as it does in chat chunks, whose schema says
  so). Chunks are checked against that schema with only this one difference.
"""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

DOCUMENT = Path(__file__).with_name("openai-gateway-subset.json")
_URI = "urn:openai-openapi"


def load_document() -> dict[str, Any]:
    """The document, adjusted for a JSON Schema validator (see the module docstring)."""
    document: dict[str, Any] = _nullable_as_null(json.loads(DOCUMENT.read_text()))
    schemas = document["components"]["schemas"]
    chunk = copy.deepcopy(schemas["CreateCompletionResponse"])
    choice = chunk["properties"]["choices"]["items"]["properties"]
    choice["finish_reason"] = {"anyOf": [choice["finish_reason"], {"type": "null"}]}
    schemas["CreateCompletionStreamResponse"] = chunk
    return document


def _nullable_as_null(node: Any) -> Any:
    if isinstance(node, list):
        return [_nullable_as_null(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _nullable_as_null(value) for key, value in node.items() if key != "nullable"}
    if node.get("nullable") is True:
        return {"anyOf": [out, {"type": "null"}]}
    return out


@cache
def _registry() -> Registry[Any]:
    resource = Resource.from_contents(load_document(), default_specification=DRAFT202012)
    return Registry().with_resource(_URI, resource)


def validator(schema: str) -> Draft202012Validator:
    """A validator for ``#/components/schemas/<schema>``, ``$ref``s resolved in the document."""
    ref = {"$ref": f"{_URI}#/components/schemas/{schema}"}
    return Draft202012Validator(ref, registry=_registry())


def violations(schema: str, instance: Any) -> list[str]:
    """Why ``instance`` does not validate against ``schema`` (empty when it does)."""
    errors = validator(schema).iter_errors(instance)
    return [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors]


def sse_data(text: str) -> list[Any]:
    """The JSON payloads of an SSE body's ``data:`` lines, ``[DONE]`` left out."""
    payloads = [line[len("data: ") :] for line in text.splitlines() if line.startswith("data: ")]
    return [json.loads(p) for p in payloads if p != "[DONE]"]
