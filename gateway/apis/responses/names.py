"""The chat request's field names as a Responses request names them
(:mod:`gateway.protocol.fieldnames`): where each chat message and tool of a translated
request came from (an ``input`` item, ``instructions``, the stored conversation, a tool of
``tools`` or of an ``additional_tools`` item), and chat's top-level fields
(``response_format`` → ``text.format``, ``max_tokens`` → ``max_output_tokens``)."""

from __future__ import annotations

from typing import Any

from gateway.apis.responses.tools import ToolMap
from gateway.protocol.fieldnames import TOOL_CHOICE, FieldNames, Origin, Site
from gateway.protocol.responses import InputItem

_FORMAT = {
    "type": ".type",
    "json_schema": "",
    "json_schema.name": ".name",
    "json_schema.description": ".description",
    "json_schema.schema": ".schema",
    "json_schema.strict": ".strict",
}
_SAME = (
    "model",
    "stream",
    "temperature",
    "top_p",
    "parallel_tool_calls",
    "user",
    "presence_penalty",
    "frequency_penalty",
    "safety_identifier",
    "prompt_cache_key",
    "service_tier",
    "seed",
    "top_k",
    "tools",
)
_MESSAGE = {"content": ".content", "role": ".role"}
_PART = {
    "type": ".type",
    "text": ".text",
    "image_url": ".image_url",
    "image_url.url": ".image_url",
    "image_url.detail": ".detail",
}
_OUTPUT = {"content": ".output", "tool_call_id": ".call_id"}
_FUNCTION_CALL = {"id": ".call_id", "function.name": ".name", "function.arguments": ".arguments"}
_CUSTOM_CALL = {"id": ".call_id", "function.name": ".name", "function.arguments": ".input"}
_MCP_CALL = {"id": ".id", "function.name": ".name", "function.arguments": ".arguments"}
_MCP_RESULT = {"content": ".output", "tool_call_id": ".id"}
_FUNCTION_TOOL = {
    "type": ".type",
    "function": "",
    "function.name": ".name",
    "function.description": ".description",
    "function.parameters": ".parameters",
    "function.strict": ".strict",
}
_CUSTOM_TOOL = {"type": ".type", "function.name": ".name", "function.description": ".description"}
_SCHEMA = frozenset({"function.parameters"})


def response_names() -> FieldNames:
    """The names of a translated Responses request, its messages and tools yet to come."""
    top = {name: Site(name, alike=True) for name in _SAME}
    top.update(
        messages=Site("input"),
        max_tokens=Site("max_output_tokens"),
        max_completion_tokens=Site("max_output_tokens"),
        response_format=Site("text.format", _FORMAT, frozenset({"json_schema.schema"})),
        reasoning_effort=Site("reasoning.effort"),
        verbosity=Site("text.verbosity"),
        stop=Site("stop", alike=True),
        tool_choice=Site("tool_choice", TOOL_CHOICE),
    )
    return FieldNames(top)


def field_origin(name: str) -> Origin:
    """A chat message made from a top-level field (``instructions``, a string ``input``,
    the conversation ``previous_response_id`` or ``conversation`` holds)."""
    return Origin(Site(name))


def item_origins(item: InputItem, i: int, made: int) -> list[Origin]:
    """The origins of the ``made`` chat messages ``item`` (``input[i]``) became."""
    path = f"input[{i}]"
    if item.type == "message":
        parts: list[Site | None] = []
        if isinstance(item.content, list):
            parts = [Site(f"{path}.content[{j}]", _PART) for j in range(len(item.content))]
        return [Origin(Site(path, _MESSAGE), parts)]
    if item.type in ("function_call_output", "custom_tool_call_output"):
        return [Origin(Site(path, _OUTPUT))]
    if item.type in ("function_call", "custom_tool_call"):
        return [Origin(Site(path), calls=[call_site(item, i)])]
    if item.type == "mcp_call":
        return [Origin(Site(path), calls=[Site(path, _MCP_CALL)]), Origin(Site(path, _MCP_RESULT))]
    return [Origin(Site(path)) for _ in range(made)]


def call_site(item: InputItem, i: int) -> Site:
    """A ``function_call`` / ``custom_tool_call`` item, as one of chat's tool calls."""
    return Site(f"input[{i}]", _CUSTOM_CALL if item.type == "custom_tool_call" else _FUNCTION_CALL)


def tool_sites(chat_tools: list[dict[str, Any]], tools: ToolMap) -> list[Site]:
    """Where each of the chat request's tools came from: its place in ``tools`` or in an
    ``additional_tools`` item; ``tools`` for one the gateway offers (hosted tools)."""
    sites = []
    for tool in chat_tools:
        named = tools.names.get(tool["function"]["name"])
        if named is None or not named.where:
            sites.append(Site("tools"))
        elif named.custom:
            sites.append(Site(named.where, _CUSTOM_TOOL))
        else:
            sites.append(Site(named.where, _FUNCTION_TOOL, _SCHEMA))
    return sites
