"""The settings of a deployment behind an OpenAI-compatible API."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import Field

from backends.http.settings import HTTPDeploymentSettings

SERVER_TOOL_PRICES: Mapping[str, float] = {
    # OpenAI's published prices for its built-in tools (platform.openai.com, pricing;
    # 2026-03), by the type of the Responses output item that records each call (so that
    # a Messages request's own server tools, which never reach this backend, hold nothing):
    "web_search_call": 10 / 1000,  # $10 per 1,000 calls (search content tokens aside)
    "file_search_call": 2.5 / 1000,  # $2.50 per 1,000 calls
    "code_interpreter_call": 0.03,  # $0.03 per container (1 GB)
}
"""Dollars per use of OpenAI's built-in tools (``price.server_tools`` overrides each)."""


class OpenAICompatSettings(HTTPDeploymentSettings):
    """One deployment behind an OpenAI-compatible API."""

    server_tool_prices: ClassVar[Mapping[str, float]] = SERVER_TOOL_PRICES

    backend: Literal["openai"]
    base_url: str = "https://api.openai.com/v1"
    chat: bool = True
    completions: bool = True
    embeddings: bool = False
    tools: bool = True
    json_schema: bool = True
    images: bool = True
    worker_stats: bool = Field(
        default=False,
        description="the upstream is a shunter worker: poll its live figures for routing",
    )
    prefill: bool = Field(
        default=True,
        description=(
            "the upstream continues a trailing assistant message (continue_final_message: "
            "vLLM, llama.cpp's server, shunter workers); false: a resumed stream is continued "
            "through a user turn instead (OpenAI's own API)"
        ),
    )
    logprobs: bool = Field(
        default=True, description="the upstream returns token logprobs (a cascade can judge it)"
    )
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] | None = Field(
        default=None,
        description=(
            "the name a chat request's output budget goes up under: max_completion_tokens "
            "for OpenAI's own API (its reasoning models refuse max_tokens), max_tokens for "
            "servers that know only that one; unset: max_completion_tokens when base_url "
            "is api.openai.com, else the budget goes as the request named it (llama.cpp's "
            "server, vLLM and Ollama take both)"
        ),
    )

    def output_budget_field(self) -> str | None:
        """The name an output budget is sent under; ``None``: as the request named it."""
        if self.max_tokens_field is not None:
            return self.max_tokens_field
        host = urlsplit(self.base_url).hostname or ""
        return "max_completion_tokens" if host == "api.openai.com" else None

    def returns_logprobs(self) -> bool:
        return self.logprobs

    def reports_held_prefixes(self) -> bool:
        return self.worker_stats
