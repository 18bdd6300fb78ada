"""The settings of a deployment behind Google's Gemini API (AI Studio, an API key)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field

from backends.http.settings import HTTPDeploymentSettings

_VERSION = re.compile(r"gemini-(\d+)")

SKIP_SIGNATURE = "skip_thought_signature_validator"
"""What Google's documentation names for a function call whose thought signature was
never seen (a conversation begun on another model): the check is skipped."""


class GeminiSettings(HTTPDeploymentSettings):
    """One deployment behind the Gemini API's ``generateContent`` (Vertex AI is not
    spoken: its URLs and OAuth login differ)."""

    backend: Literal["gemini"]
    base_url: str = "https://generativelanguage.googleapis.com"
    api_key_env: str | None = "GEMINI_API_KEY"
    api_version: str = Field(default="v1beta", pattern=r"^v[0-9a-z]+$")
    tools: bool = True
    images: bool = True
    json_schema: bool = True
    prefill: bool = Field(
        default=False,
        description=(
            "the model continues a last model turn; by default a resumed stream continues "
            "through a user turn"
        ),
    )
    thinking: Literal["level", "budget", "auto"] = Field(
        default="auto",
        description=(
            "how reasoning_effort is sent: thinkingLevel (Gemini 3 and later), "
            "thinkingBudget (Gemini 2.5, and Gemini 3 still takes it); auto: levels for a "
            "model named gemini-<3 or more>, else budgets"
        ),
    )
    include_thoughts: bool = Field(
        default=False,
        description="ask for thought summaries (answered as reasoning_content)",
    )
    call_ids: bool = Field(
        default=True,
        description="send each function call's id (and its response's) upstream",
    )
    missing_signature: str | None = Field(
        default=SKIP_SIGNATURE,
        description=(
            "the thoughtSignature sent with a turn's first function call that carries none "
            "(history from another model); null sends none"
        ),
    )

    def thinks_in_levels(self) -> bool:
        """Whether reasoning effort goes up as ``thinkingLevel`` (else ``thinkingBudget``)."""
        if self.thinking != "auto":
            return self.thinking == "level"
        version = _VERSION.match(self.model.removeprefix("models/"))
        return version is not None and int(version.group(1)) >= 3
