"""Backend kinds: the settings model each deployment kind validates with, and its backend.

Adding a backend is one package, one member of :data:`DeploymentConfig` and one line in
:data:`_BACKENDS`. No engine is imported until a deployment starts (vLLM waits for
``start()``), so a kind that is not installed costs nothing until a config asks for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Annotated, Any

from pydantic import Field

from backends.anthropic import AnthropicBackend, AnthropicSettings
from backends.base import Backend
from backends.gemini import GeminiBackend, GeminiSettings
from backends.llamacpp import LlamaCppSettings
from backends.openai import OpenAICompatBackend, OpenAICompatSettings
from backends.vllm import VLLMBackend, VLLMSettings

DeploymentConfig = Annotated[
    LlamaCppSettings | OpenAICompatSettings | AnthropicSettings | GeminiSettings | VLLMSettings,
    Field(discriminator="backend"),
]


def _llamacpp(settings: LlamaCppSettings) -> Backend:
    from backends.llamacpp.backend import LlamaCppBackend  # the engine's modules, when used

    return LlamaCppBackend(settings)


_BACKENDS: Mapping[str, Callable[[Any], Backend]] = MappingProxyType(
    {
        "llamacpp": _llamacpp,
        "openai": OpenAICompatBackend,
        "anthropic": AnthropicBackend,
        "gemini": GeminiBackend,
        "vllm": VLLMBackend,
    }
)

BACKEND_KINDS: tuple[str, ...] = tuple(_BACKENDS)


def create_backend(settings: DeploymentConfig) -> Backend:
    """Build the backend for one deployment's validated settings."""
    return _BACKENDS[settings.backend](settings)
