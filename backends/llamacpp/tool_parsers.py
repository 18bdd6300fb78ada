"""Reading tool calls out of generated text, as it streams.

A reader is fed text pieces and answers with :data:`Output` events: content text, the start
of a call (its name) and pieces of a call's arguments. The same reader serves streamed and
whole answers (a whole answer is one feed), so both give the same calls.

Readers for ``tool_choice: auto`` follow the model's own convention (``ParserName``):

* ``hermes`` (Hermes, Qwen2.5, SmolLM2, the generated demo models): ``<tool_call>{"name": ...,
  "arguments": {...}}</tool_call>``, one JSON object (or a list of them) per tag;
* ``llama3_json`` (Llama 3.1 / 3.2): ``{"name": ..., "parameters": {...}}`` at the start of the
  answer, optionally after ``<|python_tag|>``, several separated by ``;``;
* ``mistral``: ``[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]``.

They hold back text that may be the start of a call (a partial ``<tool_call>`` tag, an opening
brace where a call may start) until it is known, and release it as content otherwise. A call is
given only once it is complete, valid JSON and names an offered tool; anything else stays
content, so a malformed call is text, never an error. With ``tool_choice: required`` the grammar
guarantees the form, and :class:`CallArrayReader` streams each call's arguments as they come.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Literal, Protocol

ParserName = Literal["hermes", "llama3_json", "mistral"]
PARSER_NAMES: tuple[ParserName, ...] = ("hermes", "llama3_json", "mistral")

ARGUMENT_KEYS = ("arguments", "parameters")
"""Where a call's arguments may be: Hermes and Mistral say ``arguments``, Llama ``parameters``."""


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class CallStart:
    index: int
    name: str


@dataclass(frozen=True)
class CallArgs:
    index: int
    piece: str


Output = Text | CallStart | CallArgs


class ToolReader(Protocol):
    """Turns generated text into content and tool-call events."""

    def feed(self, text: str) -> list[Output]: ...

    def finish(self) -> list[Output]: ...


def detect_parser(template: str) -> ParserName:
    """The tool-call convention a chat template teaches; ``hermes`` when it shows none."""
    if "[TOOL_CALLS]" in template:
        return "mistral"
    if "<tool_call>" in template:
        return "hermes"
    if "<|python_tag|>" in template or ('"parameters"' in template and "<|eot_id|>" in template):
        return "llama3_json"
    return "hermes"


def markers(parser: ParserName) -> tuple[str, ...]:
    """The texts a reader looks for; a model may have them as control tokens, which must then
    be rendered into the generated text for the reader to see them."""
    return {
        "hermes": ("<tool_call>", "</tool_call>"),
        "llama3_json": ("<|python_tag|>",),
        "mistral": ("[TOOL_CALLS]",),
    }[parser]


def auto_reader(parser: ParserName, names: Collection[str], max_calls: int | None) -> ToolReader:
    """The ``tool_choice: auto`` reader for ``parser``: calls to tools outside ``names`` stay
    text, calls beyond ``max_calls`` are dropped."""
    if parser == "hermes":
        return MarkedCalls(names, max_calls, opening="<tool_call>", closing="</tool_call>")
    if parser == "mistral":
        return MarkedCalls(names, max_calls, opening="[TOOL_CALLS]")
    return MarkedCalls(names, max_calls, opening="<|python_tag|>", bare_json=True)


def read_all(reader: ToolReader, text: str) -> tuple[str | None, list[tuple[str, str]]]:
    """A whole answer's content (``None`` when empty) and its calls as (name, arguments)."""
    content: list[str] = []
    calls: list[list[str]] = []
    for event in [*reader.feed(text), *reader.finish()]:
        if isinstance(event, Text):
            content.append(event.text)
        elif isinstance(event, CallStart):
            calls.append([event.name, ""])
        else:
            calls[event.index][1] += event.piece
    return "".join(content) or None, [(name, args) for name, args in calls]


class _Emitter:
    """Orders content and complete calls; the whitespace around a call is dropped."""

    def __init__(self, max_calls: int | None) -> None:
        self._max_calls = max_calls
        self._out: list[Output] = []
        self._space = ""  # trailing whitespace, held: dropped if a call follows
        self._after_call = False
        self.calls = 0

    def text(self, text: str) -> None:
        if self._after_call:
            text = text.lstrip()
            if not text:
                return
            self._after_call = False
        body = text.rstrip()
        if not body:
            self._space += text
            return
        self._out.append(Text(self._space + body))
        self._space = text[len(body) :]

    def call(self, name: str, arguments: str) -> None:
        self._space, self._after_call = "", True
        if self._max_calls is not None and self.calls >= self._max_calls:
            return
        self._out += [CallStart(self.calls, name), CallArgs(self.calls, arguments)]
        self.calls += 1

    def finish(self) -> None:
        if not self.calls and self._space:
            self._out.append(Text(self._space))
        self._space = ""

    def take(self) -> list[Output]:
        out, self._out = self._out, []
        return out


class _JsonLexer:
    """Tracks nesting depth and string state of JSON text read one character at a time."""

    def __init__(self) -> None:
        self._depth = 0
        self._in_string = False
        self._escaped = False

    def _lex(self, char: str) -> None:
        if self._in_string:
            if self._escaped:
                self._escaped = False
            elif char == "\\":
                self._escaped = True
            elif char == '"':
                self._in_string = False
        elif char == '"':
            self._in_string = True
        elif char in "{[":
            self._depth += 1
        elif char in "}]":
            self._depth -= 1


class JsonEnd(_JsonLexer):
    """Finds where the JSON object or array at the start of a growing buffer ends; it resumes
    where it stopped, so a long call is scanned once."""

    def __init__(self) -> None:
        super().__init__()
        self._pos = 0

    def scan(self, buffer: str) -> int | None:
        """The index just past the value, or ``None`` while it is incomplete."""
        for i in range(self._pos, len(buffer)):
            char = buffer[i]
            closes = not self._in_string and char in "}]"
            self._lex(char)
            if closes and self._depth <= 0:
                self._pos = i + 1
                return i + 1
        self._pos = len(buffer)
        return None


class MarkedCalls:
    """Calls after an ``opening`` marker, each ending at ``closing`` or, without one, where
    the JSON value after the marker ends. ``bare_json``: a JSON object at the start of the
    answer (or right after a call, past ``;``) is a call too, marker or not."""

    def __init__(
        self,
        names: Collection[str],
        max_calls: int | None,
        *,
        opening: str,
        closing: str | None = None,
        bare_json: bool = False,
    ) -> None:
        self._names = names
        self._opening = opening
        self._closing = closing
        self._bare_json = bare_json
        self._emit = _Emitter(max_calls)
        self._buffer = ""
        self._state: Literal["start", "text", "marked", "body"] = "start" if bare_json else "text"
        self._lead = ""  # what came before the call's body (marker, whitespace): text if no call
        self._end = JsonEnd()

    def feed(self, text: str) -> list[Output]:
        self._buffer += text
        while self._step():
            pass
        return self._emit.take()

    def finish(self) -> list[Output]:
        if self._state == "body" and self._closing is not None:
            self._body(self._buffer, closed=False)  # a model may stop without the closing tag
        else:
            self._emit.text(self._lead + self._buffer)
        self._buffer, self._lead = "", ""
        self._emit.finish()
        return self._emit.take()

    def _step(self) -> bool:
        """Advance one state; ``False`` when more text is needed."""
        if self._state == "text":
            return self._in_text()
        if self._state == "body":
            return self._in_body()
        return self._before_body()

    def _in_text(self) -> bool:
        at = self._buffer.find(self._opening)
        if at < 0:
            keep = _partial_suffix(self._buffer, self._opening)
            self._emit.text(self._buffer[: len(self._buffer) - keep])
            self._buffer = self._buffer[len(self._buffer) - keep :]
            return False
        self._emit.text(self._buffer[:at])
        self._lead, self._buffer = self._opening, self._buffer[at + len(self._opening) :]
        self._state = "body" if self._closing is not None else "marked"
        return True

    def _before_body(self) -> bool:
        """Past a marker (or at a place a bare call may start): find where its JSON begins."""
        skip = " \t\r\n;" if self._bare_json and self._emit.calls else " \t\r\n"
        rest = self._buffer.lstrip(skip)
        if not rest:
            return False
        lead = self._buffer[: len(self._buffer) - len(rest)]
        if self._state == "start" and rest.startswith(self._opening):
            self._lead += lead + self._opening
            self._buffer, self._state = rest[len(self._opening) :], "marked"
            return True
        if self._state == "start" and self._opening.startswith(rest):
            return False  # maybe the marker, still arriving
        if rest[0] in "{[" and (self._state == "marked" or rest[0] == "{"):
            self._lead += lead
            self._buffer, self._state, self._end = rest, "body", JsonEnd()
            return True
        self._emit.text(self._lead)  # a marker with no call after it is text
        self._lead, self._state = "", "text"
        return True

    def _in_body(self) -> bool:
        if self._closing is not None:
            at = self._buffer.find(self._closing)
            if at < 0:
                return False
            body, self._buffer = self._buffer[:at], self._buffer[at + len(self._closing) :]
            self._body(body, closed=True)
            self._state = "text"
            return True
        end = self._end.scan(self._buffer)
        if end is None:
            return False
        body, self._buffer = self._buffer[:end], self._buffer[end:]
        called = self._body(body, closed=False)
        self._state = "start" if called and self._bare_json else "text"
        return True

    def _body(self, body: str, *, closed: bool) -> bool:
        calls = parse_calls(body, self._names)
        if calls is None:
            closing = self._closing if closed and self._closing else ""
            self._emit.text(self._lead + body + closing)
        else:
            for name, arguments in calls:
                self._emit.call(name, arguments)
        self._lead = ""
        return calls is not None


def parse_calls(text: str, names: Collection[str]) -> list[tuple[str, str]] | None:
    """(name, arguments JSON) for a JSON call object or list of them; ``None`` unless every
    item is a call to one of ``names`` with object arguments."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    items = value if isinstance(value, list) else [value]
    calls = [_call(item, names) for item in items]
    if not calls or any(c is None for c in calls):
        return None
    return [c for c in calls if c is not None]


def _call(item: Any, names: Collection[str]) -> tuple[str, str] | None:
    if isinstance(item, dict) and "name" not in item and isinstance(item.get("function"), dict):
        item = item["function"]  # {"type": "function", "function": {...}}
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        return None
    if item["name"] not in names:
        return None
    arguments: Any = next((item[k] for k in ARGUMENT_KEYS if k in item), {})
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    return item["name"], json.dumps(arguments, ensure_ascii=False)


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest end of ``text`` that is a proper start of ``marker``."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:size]):
            return size
    return 0


class NamedReader:
    """``tool_choice`` naming a function: the grammar makes the whole output its arguments.
    Whitespace the grammar allows after them is held, and dropped at the end."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._started = False
        self._space = ""

    def feed(self, text: str) -> list[Output]:
        out = self._start()
        joined = self._space + text
        body = joined.rstrip()
        self._space = joined[len(body) :]
        return [*out, CallArgs(0, body)] if body else out

    def finish(self) -> list[Output]:
        return self._start()

    def _start(self) -> list[Output]:
        if self._started:
            return []
        self._started = True
        return [CallStart(0, self._name)]


class CallArrayReader(_JsonLexer):
    """``tool_choice: required``: the grammar's ``[{"name": N, "arguments": {...}}, ...]``
    (name first, then arguments), read as it streams: a call opens once its name is
    complete, and its arguments follow piece by piece."""

    def __init__(self) -> None:
        super().__init__()
        self._string: list[str] = []  # a string at a call object's own level
        self._key: str | None = None
        self._expect_key = False
        self._in_arguments = False
        self._index = -1

    def feed(self, text: str) -> list[Output]:
        out: list[Output] = []
        piece: list[str] = []
        for char in text:
            if self._in_arguments:
                piece.append(char)
                self._lex(char)
                if self._depth == 2 and not self._in_string:  # the arguments object closed
                    out.append(CallArgs(self._index, "".join(piece)))
                    piece, self._in_arguments = [], False
            elif self._in_string:
                self._read_string(char, out)
            else:
                self._structure(char, piece)
        if piece:
            out.append(CallArgs(self._index, "".join(piece)))
        return out

    def finish(self) -> list[Output]:
        return []

    def _read_string(self, char: str, out: list[Output]) -> None:
        self._lex(char)
        if self._in_string:
            self._string.append(char)
            return
        value = json.loads('"' + "".join(self._string) + '"')
        if self._expect_key:
            self._key = value
        elif self._key == "name":
            out.append(CallStart(self._index, value))

    def _structure(self, char: str, piece: list[str]) -> None:
        if self._depth == 2 and char == "{" and not self._expect_key and self._key in ARGUMENT_KEYS:
            self._in_arguments = True
            piece.append(char)
        if char == '"' and self._depth == 2:
            self._string = []
        elif char == "{" and self._depth == 1:
            self._index += 1
            self._expect_key, self._key = True, None
        elif char == ":" and self._depth == 2:
            self._expect_key = False
        elif char == "," and self._depth == 2:
            self._expect_key = True
        self._lex(char)
