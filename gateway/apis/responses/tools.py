"""The tools of a Responses request as a chat upstream sees them, and the way back.

- ``function`` tools map one to one.
- ``custom`` (free-form) tools become a function with one string parameter, ``input``;
  the model's call comes back as a ``custom_tool_call`` item whose ``input`` is that
  string. Their ``format`` (a Lark or regex grammar) is described to the model in words
  only: chat upstreams take JSON schemas, not Lark grammars.
- ``namespace`` tools are flattened: each inner tool is offered as
  ``<namespace>__<name>`` (a name OpenAI's function-name rules accept), and a call of it
  comes back with its ``namespace`` and its own ``name``.
- ``additional_tools`` input items add their tools to the request's.
- An ``allowed_tools`` choice offers the upstream only the allowed tools, with the
  choice's ``mode`` as its ``tool_choice``.
- Hosted tools (``web_search``, ``file_search``, ``code_interpreter``...) run only on
  OpenAI's own servers: under the ``drop`` setting they are left out and the answer's
  ``x-shunter-dropped`` header names each one (``tools[1]=web_search``); under ``refuse``
  the request is a 400 naming ``tools[i].type``. Those the gateway runs itself (``mcp``,
  and stand-ins an operator configured: :mod:`gateway.hosted`) are left to it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.apis.responses.fields import responses_fields
from gateway.errors import InvalidRequestError
from gateway.protocol.responses import FunctionTool, InputItem

HostedTools = Literal["drop", "refuse"]
_CLIENT_TOOLS = ("function", "custom", "namespace")
_SEPARATOR = "__"


@dataclass(frozen=True)
class ToolName:
    """What a flat (upstream) tool name stands for, and where the request gave it
    (``tools[2]``, ``tools[1].tools[0]``, ``input[3].tools[0]``; empty for a tool the gateway
    offers itself)."""

    name: str
    namespace: str | None = None
    custom: bool = False
    where: str = ""


@dataclass
class ToolMap:
    """The request's tools for the upstream (``chat``) and what each flat name means;
    ``dropped``: the hosted tools left out, as ``tools[i]=type``, and the delivery fields
    of the others (``defer_loading``)."""

    chat: list[dict[str, Any]] = field(default_factory=list)
    names: dict[str, ToolName] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)
    hosted: HostedTools = "drop"
    """What becomes of tools (and their items) only OpenAI runs: the model's setting."""
    gateway_runs: bool = False
    """The gateway runs hosted tools of this request (it reads their input items)."""

    def left_out(self, name: str) -> None:
        """Report ``name`` among what the translation left out (once)."""
        if name not in self.dropped:
            self.dropped.append(name)

    def flat(self, name: str, namespace: str | None) -> str:
        """The upstream name of ``name`` in ``namespace``."""
        return f"{namespace}{_SEPARATOR}{name}" if namespace else name

    def of(self, flat: str) -> ToolName:
        """What the upstream's ``flat`` name stands for (itself when it is not known)."""
        return self.names.get(flat) or ToolName(flat)


def tool_map(
    tools: list[FunctionTool] | None,
    given: str | list[InputItem],
    hosted: HostedTools,
    served: frozenset[str] = frozenset(),
) -> ToolMap:
    """The tools of ``tools`` and of ``additional_tools`` items in ``given``; those of a
    type in ``served`` are left out (the gateway runs them itself)."""
    mapped = ToolMap(hosted=hosted)
    for i, tool in enumerate(tools or ()):
        if tool.type not in served:
            _add(mapped, tool, f"tools[{i}]", hosted, None)
    if not isinstance(given, str):
        for i, item in enumerate(given):
            if item.type == "additional_tools":
                listed: list[FunctionTool | dict[str, Any]] = [*(item.tools or ())]
                for j, given_tool in enumerate(listed):
                    where = f"input[{i}].tools[{j}]"
                    _add(mapped, _typed(given_tool, where), where, hosted, None)
    return mapped


def _typed(tool: FunctionTool | dict[str, Any], where: str) -> FunctionTool:
    """A tool of an ``additional_tools`` item: one without a ``type`` is a 400 naming it."""
    if isinstance(tool, FunctionTool):
        return tool
    raise InvalidRequestError("Missing required parameter: 'type'.", param=f"{where}.type")


def _add(
    mapped: ToolMap, tool: FunctionTool, where: str, hosted: HostedTools, namespace: str | None
) -> None:
    if tool.type not in _CLIENT_TOOLS:
        if hosted == "refuse" or namespace is not None:
            raise InvalidRequestError(
                f"Tools of type '{tool.type}' run only on OpenAI's servers and are not "
                "supported by this gateway; use function or custom tools.",
                param=f"{where}.type",
            )
        mapped.dropped.append(f"{where}={tool.type}")
        return
    if not tool.name:
        raise InvalidRequestError("Missing required parameter: 'name'.", param=f"{where}.name")
    if tool.type == "namespace":
        if namespace is not None:
            raise InvalidRequestError("Namespaces do not nest.", param=f"{where}.type")
        for j, inner in enumerate(tool.tools or ()):
            _add(mapped, inner, f"{where}.tools[{j}]", hosted, tool.name)
        return
    for name in tool.model_extra or ():
        if responses_fields().dropped("tool", name):
            mapped.left_out(name)  # delivery only: left out, said in the header
    flat = mapped.flat(tool.name, namespace)
    custom = tool.type == "custom"
    mapped.names[flat] = ToolName(tool.name, namespace, custom, where)
    function = _custom_function(tool) if custom else _function(tool)
    mapped.chat.append({"type": "function", "function": {**function, "name": flat}})


def _function(tool: FunctionTool) -> dict[str, Any]:
    function: dict[str, Any] = {}
    if tool.description is not None:
        function["description"] = tool.description
    if tool.parameters is not None:
        function["parameters"] = tool.parameters
    if tool.strict is not None:
        function["strict"] = tool.strict
    return function


def _custom_function(tool: FunctionTool) -> dict[str, Any]:
    """A free-form tool as a function of one string; its grammar, if any, described."""
    about = "The tool's whole input, as free-form text."
    fmt = tool.format or {}
    if fmt.get("type") == "grammar" and isinstance(fmt.get("definition"), str):
        about += f" It must follow this {fmt.get('syntax', '')} grammar:\n{fmt['definition']}"
    parameters = {
        "type": "object",
        "properties": {"input": {"type": "string", "description": about}},
        "required": ["input"],
        "additionalProperties": False,
    }
    function: dict[str, Any] = {"parameters": parameters}
    if tool.description is not None:
        function["description"] = tool.description
    return function


def custom_input(arguments: str) -> str:
    """The free-form input in a custom tool's call arguments (``{"input": ...}``); the
    arguments themselves when the model wrote something else."""
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return arguments
    if isinstance(parsed, dict) and isinstance(parsed.get("input"), str):
        return str(parsed["input"])
    return arguments


def custom_arguments(given: str) -> str:
    """A custom tool call's input as the arguments of its function (history)."""
    return json.dumps({"input": given}, ensure_ascii=False)


def chat_tool_choice(choice: str | dict[str, Any], mapped: ToolMap) -> Any:
    """``tool_choice`` for the upstream: a named function or custom tool, by its flat name."""
    if isinstance(choice, str):
        return choice
    name = choice.get("name")
    if choice.get("type") in ("function", "custom") and isinstance(name, str):
        namespace = choice.get("namespace")
        flat = mapped.flat(name, namespace if isinstance(namespace, str) else None)
        return {"type": "function", "function": {"name": flat}}
    raise InvalidRequestError(
        "tool_choice must be 'none', 'auto', 'required' or {\"type\": \"function\", "
        '"name": ...}.',
        param="tool_choice",
    )


def allowed_tools(choice: Any, mapped: ToolMap) -> tuple[list[dict[str, Any]], str] | None:
    """An ``allowed_tools`` choice as the upstream sees it: only the allowed tools, and the
    choice's ``mode`` (``auto`` or ``required``) as ``tool_choice``. None for any other
    choice. Cutting the list is how the gateway keeps the model from calling the others."""
    if not isinstance(choice, dict) or choice.get("type") != "allowed_tools":
        return None
    mode, listed = choice.get("mode", "auto"), choice.get("tools")
    if mode not in ("auto", "required"):
        raise InvalidRequestError("mode must be 'auto' or 'required'.", param="tool_choice.mode")
    if not isinstance(listed, list) or not listed:
        raise InvalidRequestError("tools must list at least one tool.", param="tool_choice.tools")
    names = set()
    for i, tool in enumerate(listed):
        name = tool.get("name") if isinstance(tool, dict) else None
        if (
            not isinstance(name, str)
            or mapped.flat(name, tool.get("namespace")) not in mapped.names
        ):
            raise InvalidRequestError(
                "Each allowed tool must name a function or custom tool of tools.",
                param=f"tool_choice.tools[{i}]",
            )
        names.add(mapped.flat(name, tool.get("namespace")))
    return [tool for tool in mapped.chat if tool["function"]["name"] in names], mode


def chat_tool_fields(choice: Any, tools: ToolMap) -> dict[str, Any]:
    """The upstream's ``tools`` and ``tool_choice`` for the request's."""
    if not tools.chat:
        if choice not in (None, "auto", "none"):
            raise InvalidRequestError("tool_choice needs tools.", param="tool_choice")
        return {}
    allowed = allowed_tools(choice, tools)
    if allowed is not None:
        return {"tools": allowed[0], "tool_choice": allowed[1]}
    if choice is None:
        return {"tools": tools.chat}
    return {"tools": tools.chat, "tool_choice": chat_tool_choice(choice, tools)}


def tool_echo(tools: Iterable[FunctionTool]) -> list[dict[str, Any]]:
    """The request's tools as the response object lists them."""
    echoed = []
    for tool in tools:
        if tool.type == "function":
            keys = ("name", "description", "parameters", "strict")
            echoed.append({"type": "function", **{k: getattr(tool, k) for k in keys}})
        else:
            shown = tool.model_dump(mode="json", exclude_none=True)
            echoed.append({k: v for k, v in shown.items() if k not in _SECRET_FIELDS})
    return echoed


_SECRET_FIELDS = frozenset({"authorization", "headers"})
"""Fields of an ``mcp`` tool that carry the caller's credentials: never echoed (nor
stored with the response)."""
