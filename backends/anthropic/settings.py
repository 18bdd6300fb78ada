"""The settings of a deployment behind Anthropic's Messages API."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from backends.http.settings import HTTPDeploymentSettings


class AnthropicSettings(HTTPDeploymentSettings):
    """One deployment behind Anthropic's Messages API (or a server that speaks it)."""

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
