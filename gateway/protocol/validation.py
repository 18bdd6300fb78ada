"""Request validation failures as OpenAI's 400s, naming the request field at fault.

OpenAI's ``param`` is the field's path in the request body as a client wrote it:
``messages[0].content``, ``tool_choice``, ``stop[1]``. Pydantic's error locations add
the tags of the union members it tried (``str``, ``list[str]``,
``literal['none','auto','required']``, ``function-after[...]``, a model's class name) and
``[key]`` for a bad mapping key; :func:`field_path` leaves those out.
"""

from __future__ import annotations

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from gateway.errors import InvalidRequestError

# The names pydantic-core gives the validators of plain types, as union tags. (Not every
# such name: a request field may be called ``url`` or ``date``; tests check each model.)
_TYPE_TAGS = frozenset({"any", "bool", "bytes", "dict", "float", "int", "list", "none", "str"})
_TOO_DEEP = frozenset({"recursion_depth_exceeded", "recursion_loop"})


def is_type_tag(part: str) -> bool:
    """Whether a location part names a type pydantic tried rather than a request field.

    Request fields are snake_case and never look like a tag: a generic or parametrised
    type (``list[str]``, ``literal[...]``), a plain type's name, or a model class name."""
    return "[" in part or part in _TYPE_TAGS or part[:1].isupper()


def field_path(loc: tuple[int | str, ...]) -> str | None:
    """The request field a pydantic error location points at, in OpenAI's notation."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif not is_type_tag(part):
            path += f".{part}" if path else part
    return path or None


def request_error(exc: ValidationError) -> InvalidRequestError:
    """The 400 for a request body that failed validation.

    Pydantic reports one error per union member it tried; the most specific of those about
    the first field at fault is the one a client can act on (``messages[0].content[0].type``
    rather than "not a string" when content was a list of parts)."""
    errors = exc.errors(include_url=False, include_input=False)
    first = errors[0]
    if first["type"] == "json_invalid":
        return InvalidRequestError(
            "We could not parse the JSON body of your request: "
            f"{first['msg']}. Send valid JSON with Content-Type application/json."
        )
    if first["type"] == "model_type" and not first["loc"]:
        return InvalidRequestError("The request body must be a JSON object.")
    if first["type"] in _TOO_DEEP:
        return _too_deep(first["loc"])
    error = _most_specific(errors)
    param = field_path(error["loc"])
    if param is None:  # a check of the request as a whole
        return InvalidRequestError(_said(errors, param))
    if error["type"] == "missing":
        return InvalidRequestError(f"Missing required parameter: '{param}'.", param=param)
    return InvalidRequestError(f"Invalid value for '{param}': {_said(errors, param)}", param=param)


def _too_deep(loc: tuple[int | str, ...]) -> InvalidRequestError:
    """Nesting past the depth any JSON here is read to: named at the field it starts in
    (not at its innermost list, hundreds of levels down)."""
    outer: tuple[int | str, ...] = ()
    for part in loc:
        if isinstance(part, str) and is_type_tag(part):
            break
        outer += (part,)
    param = field_path(outer)
    where = f"'{param}'" if param else "The request body"
    return InvalidRequestError(
        f"{where} is nested too deeply (lists and objects a few hundred levels deep).",
        param=param,
    )


def _most_specific(errors: list[ErrorDetails]) -> ErrorDetails:
    field = errors[0]["loc"][:1]
    same_field = [e for e in errors if e["loc"][:1] == field]
    return max(same_field, key=lambda e: _depth(e["loc"]))  # the first of the deepest


def _depth(loc: tuple[int | str, ...]) -> int:
    return sum(1 for part in loc if isinstance(part, int) or not is_type_tag(part))


def _said(errors: list[ErrorDetails], param: str | None) -> str:
    """What was wrong at ``param``; for a union, every form it could have taken."""
    said: list[str] = []
    for error in errors:
        msg = error["msg"].removeprefix("Value error, ")
        if field_path(error["loc"]) == param and msg not in said:
            said.append(msg)
    rest = [msg.removeprefix("Input should be ") for msg in said[1:]]
    return ", or ".join([said[0], *rest])
