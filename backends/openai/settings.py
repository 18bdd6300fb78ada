"""The settings of a deployment behind an OpenAI-compatible API."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from backends.http.settings import HTTPDeploymentSettings


class OpenAICompatSettings(HTTPDeploymentSettings):
    """One deployment behind an OpenAI-compatible API."""

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

    def returns_logprobs(self) -> bool:
        return self.logprobs
