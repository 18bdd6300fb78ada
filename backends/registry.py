"""Backend kinds: the settings model each deployment kind validates with, and its factory.

Adding a backend is one module, one member of :data:`DeploymentConfig` and one entry in
:func:`_factories`. Factories import their engine lazily, so an engine that is not
installed (vLLM) costs nothing until a config asks for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import Field

from backends.anthropic import AnthropicSettings
from backends.base import Backend
from backends.llamacpp import LlamaCppSettings
from backends.openai_compat import OpenAICompatSettings
from backends.vllm_settings import VLLMSettings  # no vLLM import: that waits for start()

DeploymentConfig = Annotated[
    LlamaCppSettings | OpenAICompatSettings | AnthropicSettings | VLLMSettings,
    Field(discriminator="backend"),
]

BACKEND_KINDS: tuple[str, ...] = ("llamacpp", "openai", "anthropic", "vllm")


def _llamacpp(settings: Any) -> Backend:
    from backends.llamacpp import LlamaCppBackend

    return LlamaCppBackend(settings)


def _openai(settings: Any) -> Backend:
    from backends.openai_compat import OpenAICompatBackend

    return OpenAICompatBackend(settings)


def _anthropic(settings: Any) -> Backend:
    from backends.anthropic import AnthropicBackend

    return AnthropicBackend(settings)


def _vllm(settings: Any) -> Backend:
    from backends.vllm import VLLMBackend

    return VLLMBackend(settings)


def _factories() -> dict[str, Callable[[Any], Backend]]:
    return {"llamacpp": _llamacpp, "openai": _openai, "anthropic": _anthropic, "vllm": _vllm}


def create_backend(settings: DeploymentConfig) -> Backend:
    """Build the backend for one deployment's validated settings."""
    return _factories()[settings.backend](settings)
