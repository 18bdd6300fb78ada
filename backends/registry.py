"""Backend kinds: the settings model each deployment kind validates with, and its backend.

Adding a backend is one package, one member of :data:`DeploymentConfig` and one line in
:data:`_BACKENDS`. No engine is imported until a deployment starts (vLLM waits for
``start()``), and no kind's backend module until a deployment of that kind is built, so a
kind that is not used costs nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Annotated, Any

from pydantic import Field

from backends.anthropic.settings import AnthropicSettings
from backends.base import Backend
from backends.gemini.settings import GeminiSettings
from backends.llamacpp.settings import LlamaCppSettings
from backends.openai.settings import OpenAICompatSettings
from backends.vllm.settings import VLLMSettings

DeploymentConfig = Annotated[
    LlamaCppSettings | OpenAICompatSettings | AnthropicSettings | GeminiSettings | VLLMSettings,
    Field(discriminator="backend"),
]


# Each kind's modules load with its first deployment, not with the config schema that
# names every kind: a gateway in front of one kind of upstream holds no other's code.


def _llamacpp(settings: LlamaCppSettings) -> Backend:
    from backends.llamacpp.backend import LlamaCppBackend

    return LlamaCppBackend(settings)


def _openai(settings: OpenAICompatSettings) -> Backend:
    from backends.openai.backend import OpenAICompatBackend

    return OpenAICompatBackend(settings)


def _anthropic(settings: AnthropicSettings) -> Backend:
    from backends.anthropic.backend import AnthropicBackend

    return AnthropicBackend(settings)


def _gemini(settings: GeminiSettings) -> Backend:
    from backends.gemini.backend import GeminiBackend

    return GeminiBackend(settings)


def _vllm(settings: VLLMSettings) -> Backend:
    from backends.vllm.backend import VLLMBackend

    return VLLMBackend(settings)


_BACKENDS: Mapping[str, Callable[[Any], Backend]] = MappingProxyType(
    {
        "llamacpp": _llamacpp,
        "openai": _openai,
        "anthropic": _anthropic,
        "gemini": _gemini,
        "vllm": _vllm,
    }
)

BACKEND_KINDS: tuple[str, ...] = tuple(_BACKENDS)


def create_backend(settings: DeploymentConfig) -> Backend:
    """Build the backend for one deployment's validated settings."""
    return _BACKENDS[settings.backend](settings)
