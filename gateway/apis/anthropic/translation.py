"""Anthropic Messages → the gateway's chat request, and the native path.

A Messages request is read once, as sent (:class:`~gateway.protocol.rawbody.RawBody`).
A deployment whose backend speaks Messages itself (``capabilities.native_messages``: the
``anthropic`` backend) gets those bytes with only ``model`` changed, and the client's
``anthropic-beta`` header. Every other deployment gets a chat request, translated when
it is chosen, under its own rules; routing and admission read a lenient translation that
never refuses (:meth:`MessagesCall.routed`).

The translation loses nothing silently: each field maps, or is refused with a 400 naming
it, or is dropped because the deployment's ``messages_drop`` setting lists it, and the
answer says so (``x-shunter-dropped``). What maps (:func:`to_chat`):

* ``system`` (a string or text blocks) → the first system message; a ``system`` turn in
  ``messages`` (a mid-conversation system message) → a system message at its place;
* ``text``, ``image`` and ``document`` blocks → text, image and file parts
  (:mod:`gateway.apis.anthropic.parts`); ``tool_use`` → the assistant's ``tool_calls``;
  ``tool_result`` → ``tool`` messages (before the rest of their user turn, as Anthropic
  orders them; ``is_error`` results prefixed ``Error:``), the images and files in one → a user
  message right after the tool messages (chat's tool messages carry text only);
  ``thinking`` / ``redacted_thinking`` → left out and reported (chat takes no reasoning
  back);
* ``tools`` (``input_schema`` → ``parameters``); server tools (a ``type`` such as
  ``web_search_20250305``) are refused by name, or dropped under ``server_tools``;
  ``tool_choice``, ``stop_sequences``, ``temperature``, ``top_p``, ``top_k``,
  ``max_tokens``; ``thinking.budget_tokens`` and ``output_config.effort`` →
  ``reasoning_effort``; ``output_config.format`` → ``response_format``;
* ``cache_control`` breakpoints → ``prompt_cache_key`` (a digest of the first message and
  the tools); cached tokens come back as ``cache_read_input_tokens``;
* ``metadata`` is never copied (its ``user_id`` identifies a device, not a user).

Where each chat message and tool came from is kept (:func:`translate`), so that a refusal
of the chat request names the field as the client sent it. The answers (chat → Messages)
are in :mod:`gateway.apis.anthropic.answer`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from gateway.apis.anthropic.cache_key import prompt_cache_key
from gateway.apis.anthropic.fields import messages_fields
from gateway.apis.anthropic.names import (
    PART,
    TOOL_RESULT,
    TOOL_USE,
    Said,
    ToolSites,
    Translated,
    message_names,
    system_origin,
    turn_origin,
)
from gateway.apis.anthropic.native import signed_only
from gateway.apis.anthropic.parts import block_part, summary, unmapped_extras
from gateway.apis.anthropic.turns import AssistantTurn, hosted_block
from gateway.errors import InvalidRequestError
from gateway.hosted.run import HostedRun
from gateway.protocol import ChatCompletionRequest, ChatMessage, Usage
from gateway.protocol.chat import ContentPart, FunctionCall, ToolCall
from gateway.protocol.fieldnames import FieldNames, Origin, Site
from gateway.protocol.fieldrules import Place
from gateway.protocol.messages import Block, MessageParam, MessagesRequest
from gateway.protocol.messages_codec import (
    chat_tool,
    chat_tool_choice,
    reasoning_effort,
    tool_arguments,
)
from gateway.protocol.parts import joined
from gateway.protocol.rawbody import RawBody
from gateway.protocol.validation import request_error

FORWARDED_HEADERS = ("anthropic-beta", "anthropic-version")
"""The client's headers a Messages upstream gets as they came (``anthropic-version`` in
place of the deployment's own setting)."""

_MAPPED = frozenset(
    {
        "model",
        "max_tokens",
        "messages",
        "system",
        "tools",
        "tool_choice",
        "stop_sequences",
        "temperature",
        "top_p",
        "top_k",
        "stream",
        "thinking",
        "output_config",
    }
)
_SKIPPED_BLOCKS = frozenset({"thinking", "redacted_thinking"})
_CLIENT_TOOLS = (None, "custom")


@dataclass(frozen=True)
class NativeMessage:
    """A whole answer of a deployment that speaks Messages itself, ready to be written."""

    body: bytes
    usage: Usage


@dataclass
class MessagesCall:
    """One ``POST /v1/messages`` (or ``count_tokens``): the body as sent, its model, the
    client's headers for a Messages upstream, and the chat requests it becomes."""

    raw: RawBody
    body: MessagesRequest
    headers: dict[str, str] = field(default_factory=dict)
    _routed: ChatCompletionRequest | None = None
    names: FieldNames | None = None
    """The field names of the chat request last translated, as this request names them."""
    sent: MessagesRequest = field(init=False)
    """The body as the client sent it (hosted tools replace :attr:`body`)."""
    hosted: HostedRun | None = None
    """The gateway's tool loop for the hosted tools (``mcp_servers``, stand-ins) of this
    request (:mod:`gateway.hosted.run`), when it has any."""

    @classmethod
    def read(
        cls, raw: bytes, headers: dict[str, str], kind: type[MessagesRequest] = MessagesRequest
    ) -> MessagesCall:
        """The call for ``raw``; a 400 naming the field when the body is not a request."""
        body = RawBody.read(raw)
        try:
            parsed = kind.model_validate(body.data)
        except ValidationError as exc:
            raise request_error(exc) from exc
        return cls(body, parsed, headers)

    def __post_init__(self) -> None:
        self.sent = self.body

    @property
    def model(self) -> str:
        return self.body.model

    @property
    def stream(self) -> bool:
        return bool(self.body.stream)

    def include_usage(self) -> bool:
        return False

    def routed(self) -> ChatCompletionRequest:
        """The chat request routing, admission and the cache read: translated leniently
        (nothing refused, nothing reported), so a request only a Messages upstream can
        take is routed all the same."""
        if self._routed is None:
            try:
                done = translate(self.body, lenient=True, sent=self.sent)
                self._routed, self.names = done.chat, done.names
            except InvalidRequestError:  # malformed for chat: the upstream may judge it
                self._routed = _bare(self.body)
                self.names = message_names(self.sent, [], [])
        return self._routed

    def translated(self, drops: frozenset[str], *, files: bool = False) -> Translated:
        """The chat request for a deployment that drops ``drops`` (and reads ``file``
        parts, when ``files``), what it dropped and its field names (a 400 naming the
        field it can neither map nor drop; the client's beta flags, which only
        Anthropic's API reads, among what it dropped)."""
        done = translate(self.body, drops=drops, files=files, sent=self.sent)
        rules = messages_fields()
        betas = [name for name in self.headers if rules.dropped("header", name)]
        if not betas:
            return done
        return Translated(done.chat, sorted({*done.dropped, *betas}), done.names)

    def native(self, *, count: bool = False) -> bytes:
        """The body a Messages upstream gets: as sent, ``model`` set by the backend (a
        token count goes without ``max_tokens``, which that endpoint refuses)."""
        drop = ("max_tokens", "stream") if count else ()
        changes = signed_only(self.raw.data.get("messages"))
        if drop or changes:
            return self.raw.spliced(changes, drop)
        return self.raw.text.encode("utf-8")


def to_chat(
    body: MessagesRequest,
    *,
    drops: frozenset[str] = frozenset(),
    lenient: bool = False,
    stream: bool | None = None,
    files: bool = False,
) -> tuple[ChatCompletionRequest, list[str]]:
    """The chat request for a Messages request, and the fields it dropped (``files``: the
    deployment reads ``file`` parts)."""
    done = translate(body, drops=drops, lenient=lenient, stream=stream, files=files)
    return done.chat, done.dropped


def translate(
    body: MessagesRequest,
    *,
    drops: frozenset[str] = frozenset(),
    lenient: bool = False,
    stream: bool | None = None,
    sent: MessagesRequest | None = None,
    files: bool = False,
) -> Translated:
    """:func:`to_chat`, with the field names (``sent``: the body as the client sent it,
    when hosted tools changed ``body``)."""
    translation = _Translation(body, drops, lenient, sent or body, files)
    chat = translation.request(stream)
    return Translated(chat, sorted(translation.dropped), translation.names)


class _Translation:
    """One translation: refuses what it cannot map unless ``drops`` (or ``lenient``)
    lets it go, and remembers what went."""

    def __init__(
        self,
        body: MessagesRequest,
        drops: frozenset[str],
        lenient: bool,
        sent: MessagesRequest,
        files: bool,
    ) -> None:
        self.body = body
        self.drops = drops
        self.lenient = lenient
        self.files = files  # the deployment reads file parts: a PDF document becomes one
        self.dropped: set[str] = set()
        self.cached = False  # a cache_control breakpoint was seen
        self.sent = sent
        self.tool_sites: list[Site] = []
        self.names = message_names(sent, [], [])
        self.rules = messages_fields()

    def drop(self, name: str, param: str, why: str) -> None:
        """Drop ``name`` where the rules allow it, else refuse it (a 400 naming ``param``)."""
        if self.lenient or name in self.drops:
            self.dropped.add(name)
            return
        raise InvalidRequestError(
            f"{param}: {why}; this deployment cannot take it (its messages_drop setting "
            f"may list '{name}' to drop it instead)",
            param=param,
        )

    def request(self, stream: bool | None) -> ChatCompletionRequest:
        body = self.body
        for name in (body.model_extra or {}).keys() - _MAPPED:
            self._extra(name)
        if body.metadata is not None:
            self.drop("metadata", "metadata", "metadata has no chat equivalent")
        said = self._system()
        for i, message in enumerate(body.messages):
            said.extend(self._turn(message, i))
        messages = [message for message, _ in said]
        self.names = message_names(self.sent, [origin for _, origin in said], self.tool_sites)
        if not messages:
            raise InvalidRequestError(
                "messages: at least one message is required", param="messages"
            )
        fields: dict[str, Any] = {
            "model": body.model,
            "messages": messages,
            "max_tokens": body.max_tokens,
            "stop": body.stop_sequences or None,
            "temperature": body.temperature,
            "top_p": body.top_p,
            "stream": body.stream if stream is None else stream,
        }
        if body.top_k is not None:
            fields["top_k"] = body.top_k
        fields.update(self._tools())
        fields.update(self._reasoning())
        if self.cached:
            fields["prompt_cache_key"] = prompt_cache_key(messages[0], fields.get("tools"))
        return ChatCompletionRequest(**fields)

    def _extra(self, name: str) -> None:
        self._classified("request", name, name)

    def _classified(self, place: Place, name: str, param: str) -> None:
        """A field chat has no place for, as the Messages table classifies it: a cache
        hint becomes the cache key, delivery is dropped and reported, the rest is refused
        unless the deployment drops it."""
        if name == "cache_control":
            self.cached = True
            return
        fate = self.rules.fate(place, name)
        if fate == "dropped":
            self.dropped.add(name)
        elif fate != "unused":
            self.drop(name, param, "this field has no chat equivalent")

    def _system(self) -> list[Said]:
        system = self.body.system
        if isinstance(system, list):
            for block in system:
                self._block_extras(block.model_extra, "system")
        text = self.body.system_text()
        return [(ChatMessage(role="system", content=text), system_origin())] if text else []

    def _block_extras(
        self, extra: dict[str, Any] | None, param: str, place: Place = "block"
    ) -> None:
        for name, value in (extra or {}).items():
            if value is None:
                continue
            if name == "caller" and not _direct(value):  # a program's call: it means more
                self.drop(name, f"{param}.{name}", "this field has no chat equivalent")
            else:
                self._classified(place, name, f"{param}.{name}")

    # --- turns ---------------------------------------------------------------------------

    def _turn(self, message: MessageParam, i: int) -> list[Said]:
        content = message.content
        if isinstance(content, str):
            return [(ChatMessage(role=message.role, content=content), turn_origin(i))]
        if message.role == "assistant":
            return self._assistant(content, i)
        out: list[Said] = []
        parts: list[ContentPart] = []
        sites: list[Site | None] = []
        attached: list[tuple[ContentPart, Site]] = []  # from tool results: after those
        for j, block in enumerate(content):
            param = f"messages[{i}].content[{j}]"
            if block.type in _SKIPPED_BLOCKS:
                self.dropped.add(block.type)  # reasoning: chat takes none back
                continue
            self._block_extras(unmapped_extras(block), param)
            if block.type == "tool_result" and message.role == "user":
                tool, shown = self._tool_result(block, param)
                out.append((tool, Origin(Site(param, TOOL_RESULT))))
                attached.extend(shown)
            else:
                part = self._part(block, param)
                if part is not None:
                    parts.append(part)
                    sites.append(Site(param, PART))
        if attached:
            shown_parts = [part for part, _ in attached]
            placed: list[Site | None] = [site for _, site in attached]
            out.append((ChatMessage(role="user", content=shown_parts), turn_origin(i, placed)))
        if parts:
            out.append((_message(message.role, parts), turn_origin(i, sites)))
        return out

    def _part(self, block: Block, param: str) -> ContentPart | None:
        part = block_part(block, param)
        if part is not None and (part.type != "file" or self.files):
            return part
        if self.lenient:
            return ContentPart(type="text", text=summary(block))
        self.drop(
            block.type,
            f"{param}.type",
            f"content blocks of type '{block.type}' are not supported by chat upstreams",
        )
        return None

    def _assistant(self, content: list[Block], i: int) -> list[Said]:
        """An assistant turn: its text and calls; a hosted call's result (an
        ``mcp_tool_result`` block) ends a message, as the model read it there."""
        said: list[Said] = []
        turn = AssistantTurn(i)
        for j, block in enumerate(content):
            param = f"messages[{i}].content[{j}]"
            if block.type in _SKIPPED_BLOCKS:
                self.dropped.add(block.type)  # reasoning: chat takes none back
                continue
            if block.type in ("mcp_tool_use", "mcp_tool_result"):
                said.extend(hosted_block(block, param, turn))
                continue
            self._block_extras(block.model_extra, param)
            if block.type == "text":
                turn.texts.append(block.text or "")
            elif block.type == "tool_use":
                if not block.id or not block.name:
                    raise InvalidRequestError("tool_use blocks need an id and a name", param=param)
                function = FunctionCall(name=block.name, arguments=tool_arguments(block.input))
                turn.call(ToolCall(id=block.id, function=function), Site(param, TOOL_USE))
            else:
                part = self._part(block, param)
                turn.texts.append(part.text or "" if part is not None else "")
        if said and not "".join(turn.texts) and not turn.calls:
            return said
        return [*said, turn.flush()]

    def _tool_result(
        self, block: Block, param: str
    ) -> tuple[ChatMessage, list[tuple[ContentPart, Site]]]:
        if not block.tool_use_id:
            raise InvalidRequestError(
                "tool_result blocks need a tool_use_id", param=f"{param}.tool_use_id"
            )
        content, texts, attached = block.content, [], []
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            for k, inner in enumerate(content):
                part = self._part(inner, f"{param}.content[{k}]")
                if part is not None and part.type != "text":  # an image or a file
                    attached.append((part, Site(f"{param}.content[{k}]", PART)))
                elif part is not None:
                    texts.append(part.text or "")
        text = joined(texts)
        if block.is_error:
            text = f"Error: {text}"
        tool = ChatMessage(role="tool", tool_call_id=block.tool_use_id, content=text)
        return tool, attached

    # --- tools and reasoning ---------------------------------------------------------------

    def _tools(self) -> dict[str, Any]:
        body = self.body
        out: dict[str, Any] = {}
        tools: list[dict[str, Any]] = []
        sites = ToolSites(self.sent)
        for k, tool in enumerate(body.tools or []):
            if tool.type not in _CLIENT_TOOLS:
                why = f"'{tool.type}' is a server tool, which only Anthropic's own API runs"
                self.drop("server_tools", f"tools[{k}].type", why)
                continue
            self._block_extras(tool.model_extra, f"tools[{k}]", "tool")
            tools.append(chat_tool(tool.name, tool.description, tool.input_schema))
            self.tool_sites.append(sites.site(tool))
        if tools:
            out["tools"] = tools
        choice = body.tool_choice
        if choice is not None:
            out.update(_tool_choice(choice.type, choice.name, tools))
            if choice.disable_parallel_tool_use:
                out["parallel_tool_calls"] = False
        return out

    def _reasoning(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        config = (self.body.model_extra or {}).get("output_config")
        config = config if isinstance(config, dict) else {}
        effort = reasoning_effort(self.body.thinking, config.get("effort"))
        if effort is not None:
            out["reasoning_effort"] = effort
        form = config.get("format")
        if isinstance(form, dict) and form.get("type") == "json_schema":
            schema = {"name": "output", "schema": form.get("schema")}
            out["response_format"] = {"type": "json_schema", "json_schema": schema}
        for name in config.keys() - {"effort", "format"}:
            self.drop(f"output_config.{name}", f"output_config.{name}", "no chat equivalent")
        return out


def _bare(body: MessagesRequest) -> ChatCompletionRequest:
    """A request that even a lenient translation cannot read, as one user message of its
    JSON: enough for routing to weigh it."""
    text = json.dumps([m.model_dump(mode="json") for m in body.messages], ensure_ascii=False)
    message = ChatMessage(role="user", content=text)
    return ChatCompletionRequest(model=body.model, messages=[message], max_tokens=body.max_tokens)


def _direct(caller: Any) -> bool:
    """A ``caller`` that says the model made the call itself (nothing for chat to know);
    any other caller (a tool's program) changes what the call means."""
    return isinstance(caller, dict) and caller.get("type") == "direct"


def _message(role: str, parts: list[ContentPart]) -> ChatMessage:
    if all(p.type == "text" for p in parts):
        return ChatMessage(role=role, content=joined([p.text or "" for p in parts]))  # type: ignore[arg-type]
    return ChatMessage(role=role, content=parts)  # type: ignore[arg-type]


def _tool_choice(kind: str, name: str | None, tools: list[dict[str, Any]]) -> dict[str, Any]:
    if kind == "tool":
        if not name:
            raise InvalidRequestError(
                "tool_choice of type tool needs a name", param="tool_choice.name"
            )
        if not any(tool["function"]["name"] == name for tool in tools):
            raise InvalidRequestError(
                f"tool_choice names the tool '{name}', which is not in tools",
                param="tool_choice.name",
            )
    elif kind in ("any", "auto") and not tools:
        return {}
    return {"tool_choice": chat_tool_choice(kind, name)}
