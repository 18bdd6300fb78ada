"""The settings of a deployment behind Anthropic's Messages API."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Literal

from pydantic import Field

from backends.http.settings import HTTPDeploymentSettings

SERVER_TOOL_PRICES: Mapping[str, float] = {
    # Anthropic's published prices (docs.claude.com, pricing; 2026-03), by the name
    # usage.server_tool_use counts them under (web_search_requests -> web_search):
    "web_search": 10 / 1000,  # $10 per 1,000 searches
    "web_fetch": 0.0,  # no charge beyond the tokens of what it fetched
    # $0.05 per container-hour, each run billed at least 5 minutes
    "code_execution": 0.05 / 12,
}
"""Dollars per use of Anthropic's server tools (``price.server_tools`` overrides each)."""


class AnthropicSettings(HTTPDeploymentSettings):
    """One deployment behind Anthropic's Messages API (or a server that speaks it)."""

    server_tool_prices: ClassVar[Mapping[str, float]] = SERVER_TOOL_PRICES

    backend: Literal["anthropic"]
    base_url: str = "https://api.anthropic.com"
    api_key_env: str | None = "ANTHROPIC_API_KEY"
    anthropic_version: str = "2023-06-01"
    default_max_tokens: int = Field(default=4096, ge=1)
    tools: bool = True
    images: bool = True
    prefill: bool = Field(
        default=True,
        description=(
            "the model continues a last assistant turn; false for models that refuse "
            "prefill (a resumed stream then continues through a user turn)"
        ),
    )
