"""What a chat request asks of tools on the llama.cpp engine: which tools the model is offered,
the grammar that constrains its output, and the reader that turns its output into calls.

``tool_choice`` (OpenAI's default: ``auto`` with tools, ``none`` without):

* ``none``: tools are not offered and nothing is read as a call;
* ``auto``: tools are offered through the chat template and the output is read in the model's
  own convention (:mod:`~backends.llamacpp.tool_parsers`); no grammar, unless the request also
  has a ``response_format``: then the grammar allows either that response or calls;
* ``required``: a grammar over the union of the tools' schemas, in one model-independent form,
  ``[{"name": ..., "arguments": {...}}, ...]`` (``parameters`` for Llama's convention), one
  item when ``parallel_tool_calls`` is false;
* a named function: a grammar over that function's parameters; the output is its arguments.
"""

from __future__ import annotations

import json
import secrets
import string
from dataclasses import dataclass
from typing import Any, Literal

from backends.llamacpp.tool_parsers import (
    CallArrayReader,
    CallStart,
    NamedReader,
    Output,
    ParserName,
    Text,
    ToolReader,
    auto_reader,
)
from gateway.errors import InvalidRequestError
from gateway.protocol import (
    AssistantMessage,
    ChatCompletionRequest,
    ChoiceDelta,
    ToolCall,
    ToolCallDelta,
)
from gateway.protocol.chat import FunctionCall, Tool

Mode = Literal["none", "auto", "required", "named"]

_ID_ALPHABET = string.ascii_letters + string.digits


def new_call_id() -> str:
    """``call_`` and 24 letters or digits: its last nine make the id Mistral templates ask for."""
    return "call_" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(24))


@dataclass(frozen=True)
class ToolPlan:
    """What one request asks of tools: the mode, the tools offered, whether several calls
    may come in one answer, and the function a named ``tool_choice`` forces."""

    mode: Mode
    tools: tuple[Tool, ...] = ()  # offered to the model; none for mode "none"
    parallel: bool = True
    named: str | None = None

    @property
    def forced(self) -> bool:
        """The output is a call whatever the model would say (a grammar makes it one)."""
        return self.mode in ("required", "named")

    def offered(self) -> list[dict[str, Any]] | None:
        """The tools as the chat template receives them."""
        return [t.model_dump(exclude_none=True) for t in self.tools] or None


def plan_tools(request: ChatCompletionRequest) -> ToolPlan:
    """The request's tool plan; a ``tool_choice`` that cannot be met is a 400."""
    tools = tuple(request.tools or ())
    choice = request.tool_choice or ("auto" if tools else "none")
    parallel = request.parallel_tool_calls is not False
    if choice == "none" or (choice == "auto" and not tools):
        return ToolPlan("none", parallel=parallel)
    if not tools:
        raise InvalidRequestError(
            "tool_choice needs tools: give at least one function in 'tools'", param="tool_choice"
        )
    if choice in ("auto", "required"):
        return ToolPlan("auto" if choice == "auto" else "required", tools, parallel)
    assert not isinstance(choice, str)
    name = choice.function.name
    if not any(t.function.name == name for t in tools):
        raise InvalidRequestError(
            f"tool_choice names {name!r}, which is not in tools", param="tool_choice"
        )
    return ToolPlan("named", tools, parallel, named=name)


def tool_reader(
    plan: ToolPlan, request: ChatCompletionRequest, parser: ParserName
) -> ToolReader | None:
    """How the output is read; ``None``: it is plain content."""
    if plan.mode == "none":
        return None
    if plan.mode == "named":
        assert plan.named is not None
        return NamedReader(plan.named)
    if plan.mode == "required":
        return CallArrayReader()
    if _response_schema(request) is not None:
        return _CallsOrContent()
    names = frozenset(t.function.name for t in plan.tools)
    return auto_reader(parser, names, None if plan.parallel else 1)


def chat_grammar(
    plan: ToolPlan, request: ChatCompletionRequest, parser: ParserName
) -> tuple[Any, str]:
    """The llama_cpp ``LlamaGrammar`` (or ``None``) for a chat request, and the request field
    to name when llama.cpp rejects it."""
    key = _arguments_key(parser)
    if plan.mode == "named":
        index = next(i for i, t in enumerate(plan.tools) if t.function.name == plan.named)
        return _compile(_parameters(plan.tools[index], index), "tools"), "tools"
    if plan.mode == "required":
        return _compile(_calls_schema(plan, key), "tools"), "tools"
    response = _response_schema(request)
    if response is None:
        return None, "response_format"
    if plan.mode == "auto":
        return _compile(_calls_or(response, plan, key), "response_format"), "response_format"
    if request.response_format is not None and request.response_format.type == "json_object":
        from llama_cpp.llama_grammar import JSON_GBNF, LlamaGrammar

        return LlamaGrammar.from_string(JSON_GBNF, verbose=False), "response_format"
    return _compile(response, "response_format"), "response_format"


def _calls_or(response: dict[str, Any], plan: ToolPlan, key: str) -> dict[str, Any]:
    """Calls, or the response object: an array and an object tell themselves apart."""
    if response.get("type", "object") != "object":
        raise InvalidRequestError(
            "with tools, a json_schema response_format must describe an object",
            param="response_format",
        )
    calls = _calls_schema(plan, key)
    defs = calls.pop("$defs", {})
    response, own = _hoist_defs(response, "response-")
    return {"anyOf": [calls, response], "$defs": {**defs, **own}}


def _response_schema(request: ChatCompletionRequest) -> dict[str, Any] | None:
    form = request.response_format
    if form is None or form.type == "text":
        return None
    if form.type == "json_object":
        return {"type": "object"}
    assert form.json_schema is not None
    return form.json_schema.schema_ or {"type": "object"}


def _arguments_key(parser: ParserName) -> str:
    return "parameters" if parser == "llama3_json" else "arguments"


def _parameters(tool: Tool, index: int) -> dict[str, Any]:
    schema = tool.function.parameters or {"type": "object", "properties": {}}
    if schema.get("type", "object") != "object":
        raise InvalidRequestError(
            "a function's parameters must be a JSON schema of type 'object'",
            param=f"tools[{index}].function.parameters",
        )
    return schema


def _calls_schema(plan: ToolPlan, key: str) -> dict[str, Any]:
    """JSON schema of the calls: an array of ``{"name": <a tool>, key: <its parameters>}``."""
    items: list[dict[str, Any]] = []
    defs: dict[str, Any] = {}
    for i, tool in enumerate(plan.tools):
        parameters, own = _hoist_defs(_parameters(tool, i), f"tool{i}-")
        defs.update(own)
        items.append(
            {
                "type": "object",
                "properties": {"name": {"const": tool.function.name}, key: parameters},
                "required": ["name", key],
            }
        )
    schema: dict[str, Any] = {"type": "array", "items": {"anyOf": items}, "minItems": 1}
    if not plan.parallel:
        schema["maxItems"] = 1
    if defs:
        schema["$defs"] = defs
    return schema


def _hoist_defs(schema: dict[str, Any], prefix: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``schema`` without its ``$defs`` / ``definitions``, its local references renamed to
    ``#/$defs/<prefix><name>``, and those definitions so renamed: a schema nested in
    another keeps its references working once its definitions sit at the new root."""
    defs = {**schema.get("definitions", {}), **schema.get("$defs", {})}
    body = {k: v for k, v in schema.items() if k not in ("$defs", "definitions")}

    def rename(node: Any) -> Any:
        if isinstance(node, list):
            return [rename(n) for n in node]
        if not isinstance(node, dict):
            return node
        out = {k: rename(v) for k, v in node.items()}
        ref = out.get("$ref")
        if isinstance(ref, str):
            for old in ("#/$defs/", "#/definitions/"):
                if ref.startswith(old):
                    out["$ref"] = "#/$defs/" + prefix + ref[len(old) :]
        return out

    return rename(body), {prefix + k: rename(v) for k, v in defs.items()}


# A character of a JSON string, stricter than the converter's own rules: no raw control
# characters (invalid JSON), no unescaped quote or backslash from a pattern's "any character",
# and none of the code points llama.cpp's lenient UTF-8 decoding yields for malformed bytes (a
# lead byte 0xF5-0xFF, an encoded surrogate), which come out as several U+FFFD and break
# maxLength. Overlong encodings still pass: they decode to ordinary code points.
_STRING_CHAR = r'[^"\\\x00-\x1F\uD800-\uDFFF\U00110000-\U003FFFFF]'
_FREE_END = ".{0,16}"
_LOOSE_CHARS = {"char": r'[^"\\]', "dot": r"[^\x0A\x0D]"}


def _compile(schema: dict[str, Any], param: str) -> Any:
    from llama_cpp.llama_grammar import LlamaGrammar, json_schema_to_gbnf

    try:
        text = json_schema_to_gbnf(json.dumps(_anchored(schema)))
    except Exception as exc:  # the converter raises bare exceptions on what it cannot express
        raise InvalidRequestError(f"unsupported JSON schema: {exc}", param=param) from exc
    return LlamaGrammar.from_string(_strict_strings(text), verbose=False)


def _anchored(node: Any) -> Any:
    """``node`` with every ``pattern`` anchored at both ends, as the grammar converter needs.

    A JSON Schema pattern matches anywhere in the string (``ab`` accepts ``xaby``); the
    converter refuses a pattern without ``^`` and ``$``. ``ab`` becomes
    ``^.{0,16}(ab).{0,16}$`` (``^ab``: ``^(ab).{0,16}$``): every string the grammar lets
    the model write matches the pattern, and the free ends are short, so that a model
    cannot wander off in them.
    """
    if isinstance(node, list):
        return [_anchored(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _anchored(value) for key, value in node.items()}
    pattern = node.get("pattern")
    if isinstance(pattern, str) and not (pattern.startswith("^") and pattern.endswith("$")):
        head = "^" if pattern.startswith("^") else f"^{_FREE_END}"
        tail = "$" if pattern.endswith("$") and not pattern.endswith("\\$") else f"{_FREE_END}$"
        core = pattern[1 if head == "^" else 0 : len(pattern) - (1 if tail == "$" else 0)]
        out["pattern"] = f"{head}({core}){tail}"
    return out


def _strict_strings(grammar: str) -> str:
    """``grammar`` (from llama-cpp-python's JSON-schema converter) with its string-character
    rules replaced by :data:`_STRING_CHAR`; rules written otherwise are left as they are."""
    lines = []
    for line in grammar.splitlines():
        name, _, rule = line.partition(" ::= ")
        loose = _LOOSE_CHARS.get(name)
        if loose is not None and rule.startswith(loose):
            line = f"{name} ::= {_STRING_CHAR}{rule[len(loose) :]}"
        lines.append(line)
    return "\n".join(lines)


class _CallsOrContent:
    """``auto`` with a ``response_format``: the grammar allows a call array or the response
    object, and the first character tells which."""

    def __init__(self) -> None:
        self._reader: ToolReader | None = None
        self._head = ""

    def feed(self, text: str) -> list[Output]:
        if self._reader is None:
            self._head += text
            if not self._head.strip():
                return []
            first = self._head.lstrip()[0]
            self._reader = CallArrayReader() if first == "[" else _Content()
            text, self._head = self._head, ""
        return self._reader.feed(text)

    def finish(self) -> list[Output]:
        if self._reader is None:
            return [Text(self._head)] if self._head else []
        return self._reader.finish()


class _Content:
    def feed(self, text: str) -> list[Output]:
        return [Text(text)] if text else []

    def finish(self) -> list[Output]:
        return []


class CallIds:
    """The ids of one answer's calls, by call index: a stream and its parts agree."""

    def __init__(self) -> None:
        self._ids: dict[int, str] = {}

    def __call__(self, index: int) -> str:
        return self._ids.setdefault(index, new_call_id())


def whole_message(events: list[Output]) -> AssistantMessage:
    """A whole answer: its text (``None`` beside calls when there is none) and its calls."""
    text: list[str] = []
    calls: list[tuple[str, list[str]]] = []
    for event in events:
        if isinstance(event, Text):
            text.append(event.text)
        elif isinstance(event, CallStart):
            calls.append((event.name, []))
        else:
            calls[event.index][1].append(event.piece)
    ids = CallIds()
    tool_calls = [
        ToolCall(id=ids(i), function=FunctionCall(name=name, arguments="".join(pieces)))
        for i, (name, pieces) in enumerate(calls)
    ]
    content = "".join(text) or (None if tool_calls else "")
    return AssistantMessage(content=content, tool_calls=tool_calls or None)


def stream_deltas(events: list[Output], ids: CallIds) -> list[ChoiceDelta]:
    """One stream step's deltas: text joined into one, a call's first delta carrying its id,
    type, name and the arguments that came with it, later ones only arguments."""
    out: list[ChoiceDelta] = []
    for event in events:
        last = out[-1] if out else None
        if isinstance(event, Text):
            if last is not None and last.content is not None:
                last.content += event.text
            else:
                out.append(ChoiceDelta(content=event.text))
        elif isinstance(event, CallStart):
            function = {"name": event.name, "arguments": ""}
            call = ToolCallDelta(
                index=event.index, id=ids(event.index), type="function", function=function
            )
            out.append(ChoiceDelta(tool_calls=[call]))
        elif last is not None and last.tool_calls and last.tool_calls[-1].index == event.index:
            joined = last.tool_calls[-1].function
            assert joined is not None
            joined["arguments"] = joined.get("arguments", "") + event.piece
        else:
            call = ToolCallDelta(index=event.index, function={"arguments": event.piece})
            out.append(ChoiceDelta(tool_calls=[call]))
    return out
