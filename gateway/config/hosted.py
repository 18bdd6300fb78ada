"""``hosted:``: how the gateway runs hosted tools itself (``mcp`` tools of
``/v1/responses``, ``mcp_servers`` of ``/v1/messages``, and stand-ins for OpenAI's and
Anthropic's server tools) on deployments that cannot.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class StandIn(BaseModel):
    """An MCP tool that runs in place of a provider's server tool (``web_search``): the
    model is offered a function of one string, ``argument``, passed to ``tool`` of
    ``server``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    server: str = Field(min_length=1, description="a server of mcp.servers")
    tool: str = Field(min_length=1, description="the tool of that server")
    argument: str = Field(default="query", min_length=1, description="its string argument")
    max_length: int = Field(
        default=512, ge=1, le=100_000, description="the argument's length at most"
    )
    description: str = Field(
        default="Search the web; returns the results as text.",
        description="what the model is told the tool does",
    )


class HostedSettings(BaseModel):
    """``hosted:``: the hosted-tool loop's bounds and what a request may ask of it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_tool_calls: int = Field(
        default=16,
        ge=1,
        le=256,
        description="tool calls one response may run (a request's max_tool_calls, if "
        "lower, wins); past it the response ends incomplete",
    )
    request_servers: bool = Field(
        default=False,
        description="allow MCP servers a request names by URL (the gateway then connects "
        "to any URL a caller gives it: an SSRF risk; off unless every caller is trusted)",
    )
    request_server_timeout_s: float = Field(
        default=30.0, gt=0, le=600, description="per list and call on a request's server"
    )
    max_result_chars: int = Field(
        default=100_000,
        ge=1,
        description="a tool result is cut to this many characters before the model reads it",
    )
    stand_ins: dict[str, StandIn] = Field(
        default_factory=dict,
        description="provider server tools (web_search) run through an MCP tool",
    )
