"""OpenAI and every OpenAI-compatible server (Together, Fireworks, Groq, OpenRouter, remote
vLLM / SGLang / TGI / Ollama / llama-server, a ``shunter worker``): the backend
(:mod:`~backends.openai.backend`), its settings (:mod:`~backends.openai.settings`) and the
raw stream passed through (:mod:`~backends.openai.frames`)."""

from backends.openai.backend import OpenAICompatBackend
from backends.openai.settings import OpenAICompatSettings

__all__ = ["OpenAICompatBackend", "OpenAICompatSettings"]
