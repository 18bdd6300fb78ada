"""The chat request's field names as a Messages request names them
(:mod:`gateway.protocol.fieldnames`): the sites of ``system``, of each turn of
``messages`` and of its blocks (a ``tool_result`` block became a chat ``tool`` message of
its own, a ``tool_use`` block one of an assistant message's ``tool_calls``), of each tool,
and chat's top-level fields (``stop`` → ``stop_sequences``, ``response_format`` →
``output_config.format``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gateway.protocol import ChatCompletionRequest, ChatMessage
from gateway.protocol.fieldnames import TOOL_CHOICE, FieldNames, Origin, Site
from gateway.protocol.messages import MessagesRequest, ToolParam

Said = tuple[ChatMessage, Origin]
"""A chat message of the translation, and where it came from."""

MESSAGE = {"content": ".content", "role": ".role"}
PART = {"type": ".type", "text": ".text", "image_url": ".source"}
TOOL_RESULT = {"content": ".content", "tool_call_id": ".tool_use_id"}
TOOL_USE = {"id": ".id", "function.name": ".name", "function.arguments": ".input"}
_TOOL = {
    "function": "",
    "function.name": ".name",
    "function.description": ".description",
    "function.parameters": ".input_schema",
}
_SCHEMA = frozenset({"function.parameters"})
_SAME = ("model", "stream", "temperature", "top_p", "top_k", "messages", "tools")
_FORMAT = {"type": ".type", "json_schema": "", "json_schema.schema": ".schema"}


@dataclass(frozen=True)
class Translated:
    """A Messages request as a chat request: the fields it dropped, and the chat
    request's field names as the Messages request names them."""

    chat: ChatCompletionRequest
    dropped: list[str]
    names: FieldNames


def message_names(body: MessagesRequest, origins: list[Origin], tools: list[Site]) -> FieldNames:
    """The names of a translated Messages request (``origins``: its chat messages',
    ``tools``: its chat tools')."""
    top = {name: Site(name, alike=True) for name in _SAME}
    config = (body.model_extra or {}).get("output_config")
    effort = isinstance(config, Mapping) and config.get("effort") is not None
    top.update(
        max_tokens=Site("max_tokens"),
        max_completion_tokens=Site("max_tokens"),
        stop=Site("stop_sequences", alike=True),
        tool_choice=Site("tool_choice", TOOL_CHOICE),
        parallel_tool_calls=Site("tool_choice.disable_parallel_tool_use"),
        response_format=Site("output_config.format", _FORMAT, frozenset({"json_schema.schema"})),
        reasoning_effort=Site("output_config.effort" if effort else "thinking"),
    )
    return FieldNames(top, origins, tools)


def system_origin() -> Origin:
    return Origin(Site("system"))


def turn_origin(i: int, parts: list[Site | None] | None = None) -> Origin:
    """A chat message made of turn ``messages[i]`` (``parts``: its parts' blocks)."""
    return Origin(Site(f"messages[{i}]", MESSAGE), parts or [])


class ToolSites:
    """Where each tool of the translated body was in the request as sent (hosted tools
    replace the client's server tools and add a server's tools: those name
    ``mcp_servers``, or ``tools``)."""

    def __init__(self, sent: MessagesRequest) -> None:
        self._index = {id(tool): k for k, tool in enumerate(sent.tools or ())}
        self._hosted = "mcp_servers" if "mcp_servers" in (sent.model_extra or {}) else "tools"

    def site(self, tool: ToolParam) -> Site:
        k = self._index.get(id(tool))
        return Site(self._hosted) if k is None else Site(f"tools[{k}]", _TOOL, _SCHEMA)
