"""OpenAI and every OpenAI-compatible server (Together, Fireworks, Groq, OpenRouter, remote
vLLM / SGLang / TGI / Ollama / llama-server, a ``shunter worker``)."""

from backends.openai.backend import OpenAICompatBackend
from backends.openai.settings import OpenAICompatSettings

__all__ = ["OpenAICompatBackend", "OpenAICompatSettings"]
