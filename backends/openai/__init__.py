"""OpenAI and every OpenAI-compatible server (Together, Fireworks, Groq, OpenRouter, remote
vLLM / SGLang / TGI / Ollama / llama-server, a ``shunter worker``): the backend
(:mod:`~backends.openai.backend`), its settings (:mod:`~backends.openai.settings`) and the
raw stream passed through (:mod:`~backends.openai.frames`)."""

from typing import TYPE_CHECKING, Any

from backends.openai.settings import OpenAICompatSettings

if TYPE_CHECKING:
    from backends.openai.backend import OpenAICompatBackend


def __getattr__(name: str) -> Any:
    # the backend's modules load with the first deployment of this kind (see
    # backends.registry), not with the config schema that names every kind
    if name == "OpenAICompatBackend":
        from backends.openai.backend import OpenAICompatBackend

        return OpenAICompatBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["OpenAICompatBackend", "OpenAICompatSettings"]
