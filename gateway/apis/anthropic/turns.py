"""An assistant turn of a Messages request as chat messages: its text and calls
(``tool_use`` blocks, and the ``mcp_tool_use`` blocks of hosted calls the gateway ran), a
message ended by each hosted call's result, with where each came from."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.apis.anthropic.names import MESSAGE, TOOL_RESULT, TOOL_USE, Said
from gateway.errors import InvalidRequestError
from gateway.protocol import ChatMessage
from gateway.protocol.chat import FunctionCall, ToolCall
from gateway.protocol.fieldnames import Origin, Site
from gateway.protocol.messages import Block
from gateway.protocol.messages_codec import tool_arguments


@dataclass
class AssistantTurn:
    """An assistant turn's text and calls not yet in a chat message."""

    i: int
    texts: list[str] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    sites: list[Site] = field(default_factory=list)

    def call(self, call: ToolCall, site: Site) -> None:
        self.calls.append(call)
        self.sites.append(site)

    def flush(self) -> Said:
        """The assistant message so far (its text and calls, then forgotten)."""
        text = "".join(self.texts) or None
        message = ChatMessage(role="assistant", content=text, tool_calls=list(self.calls) or None)
        origin = Origin(Site(f"messages[{self.i}]", MESSAGE), calls=list(self.sites))
        self.texts.clear()
        self.calls.clear()
        self.sites.clear()
        return message, origin


def hosted_block(block: Block, param: str, turn: AssistantTurn) -> list[Said]:
    """A hosted MCP call the gateway ran (``mcp_tool_use``: the model's call, named
    ``<server>__<tool>`` as it was offered) or its result (``mcp_tool_result``: it ends
    the assistant message so far, then the result follows as a tool message)."""
    if block.type == "mcp_tool_use":
        server = (block.model_extra or {}).get("server_name")
        if not block.id or not block.name or not isinstance(server, str):
            raise InvalidRequestError(
                "mcp_tool_use blocks need an id, a name and a server_name", param=param
            )
        flat = f"{server}__{block.name}"
        function = FunctionCall(name=flat, arguments=tool_arguments(block.input))
        turn.call(ToolCall(id=block.id, function=function), Site(param, TOOL_USE))
        return []
    if not block.tool_use_id:
        raise InvalidRequestError(
            "mcp_tool_result blocks need a tool_use_id", param=f"{param}.tool_use_id"
        )
    content = block.content
    text = content if isinstance(content, str) else ""
    if isinstance(content, list):
        text = "".join(inner.text or "" for inner in content)
    if block.is_error:
        text = f"Error: {text}"
    out = [turn.flush()] if turn.texts or turn.calls else []
    result = ChatMessage(role="tool", tool_call_id=block.tool_use_id, content=text)
    out.append((result, Origin(Site(param, TOOL_RESULT))))
    return out
