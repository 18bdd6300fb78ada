"""A translated request's chat field names, as the API the client called names them.

Responses and Messages requests are served as chat requests, so whatever refuses one after
its translation (validation of the chat request, routing, a backend, an upstream's 400)
names a field of that chat request: ``messages[3].content[1].type``,
``tools[1].function.parameters``, ``response_format``, ``max_tokens``. The translation
records, as it builds each chat message and tool, where it came from in the request the
client sent (:class:`FieldNames`); :meth:`FieldNames.rename` renames a refusal once, where
the request path hands it to the endpoint's error shape (:mod:`gateway.http.serving`).

A chat path without an exact counterpart names the closest field that encloses it in the
client's request (``input[2]`` for a part of a message that became plain text, ``input``
for a message the gateway added itself); a chat field the client's API has no name for
names nothing (``param`` null), never a chat-only name.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from gateway.errors import ContextLengthExceededError, GatewayError

_CUT = re.compile(r"[.\[]")
_INDEXED = re.compile(r"^(messages|tools)\[(\d+)\](.*)$", re.DOTALL)
_PART = re.compile(r"^\.(content|tool_calls)\[(\d+)\](.*)$", re.DOTALL)
_NO_NAMES: Mapping[str, str] = {}

TOOL_CHOICE: Mapping[str, str] = {"function": "", "function.name": ".name", "type": ".type"}
"""Chat's ``tool_choice`` fields under a named choice, as Responses and Messages name them
(the function's fields sit on the choice itself)."""


@dataclass(frozen=True)
class Site:
    """A place in the client's request (``path``), and how chat's fields under the chat
    element made from it are named there: ``names`` maps a chat sub-path
    (``function.parameters``) to the client's (``.input_schema``; ``""``: the place
    itself); below a sub-path in ``deep`` (a JSON schema passed on as it came) the rest is
    named alike; ``alike``: everything below is named alike (``stop[1]``)."""

    path: str
    names: Mapping[str, str] = field(default_factory=lambda: _NO_NAMES)
    deep: frozenset[str] = frozenset()
    alike: bool = False

    def name(self, rest: str) -> str:
        """The client's path for chat's ``rest`` (``.type``, ``[1]``) under this site."""
        for head, tail in _heads(rest):
            named = self.names.get(head)
            if named is not None:
                return self.path + named + (tail if head in self.deep else "")
        return self.path + rest if self.alike else self.path


@dataclass
class Origin:
    """Where one chat message came from: its ``site`` (a message, an item, a block, a
    top-level field), and the site of each of its content parts and tool calls (``None``
    for a part the client did not send as one)."""

    site: Site
    parts: list[Site | None] = field(default_factory=list)
    calls: list[Site] = field(default_factory=list)

    def name(self, rest: str) -> str:
        found = _PART.match(rest)
        if found is not None:
            kind, index, tail = found.group(1), int(found.group(2)), found.group(3)
            listed: list[Site | None] = self.parts if kind == "content" else list(self.calls)
            inner = listed[index] if index < len(listed) else None
            return inner.name(tail) if inner is not None else self.site.name(f".{kind}")
        return self.site.name(rest)


@dataclass
class FieldNames:
    """Chat's field names → the client's, for one translated request: ``top`` for chat's
    top-level fields (one absent from it has no name in the client's API), ``messages``
    and ``tools`` for each chat message and tool, in the chat request's order."""

    top: Mapping[str, Site]
    messages: list[Origin] = field(default_factory=list)
    tools: list[Site] = field(default_factory=list)

    def name(self, chat: str) -> str | None:
        """The client's name for the chat request's field ``chat``."""
        indexed = _INDEXED.match(chat)
        if indexed is not None:
            kind, index, rest = indexed.group(1), int(indexed.group(2)), indexed.group(3)
            if kind == "messages" and index < len(self.messages):
                return self.messages[index].name(rest)
            if kind == "tools" and index < len(self.tools):
                return self.tools[index].name(rest)
            chat = kind  # one the gateway added (a hosted tool's, a resumed answer)
        head = _CUT.split(chat, 1)[0]
        site = self.top.get(head)
        return site.name(chat[len(head) :]) if site is not None else None

    def rename(self, exc: GatewayError) -> None:
        """Name ``exc``'s field as the client's API does, once; its message too, where it
        quotes the chat path. A context overflow that names nothing is about the prompt."""
        if exc.param_named:
            return
        exc.param_named = True
        chat = exc.param
        if chat is None and isinstance(exc, ContextLengthExceededError):
            chat = "messages"
        if chat is None:
            return
        named = self.name(chat)
        exc.param = named
        if named is not None and named != chat and _CUT.search(chat):
            quoted = re.compile(re.escape(chat) + r"(?![\w\[]|\.\w)")
            exc.message = quoted.sub(named, exc.message)


def _heads(rest: str) -> Iterator[tuple[str, str]]:
    """``rest``'s leading sub-paths, longest first, each with what follows it:
    ``.a.b[0]`` → (``a.b[0]``, ``""``), (``a.b``, ``[0]``), (``a``, ``.b[0]``)."""
    body = rest.removeprefix(".")
    cuts = [found.start() for found in _CUT.finditer(body)]
    for cut in [len(body), *reversed(cuts)]:
        if cut:
            yield body[:cut], body[cut:]
