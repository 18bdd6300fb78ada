"""OpenAI and every OpenAI-compatible server (Together, Fireworks, Groq, OpenRouter, remote
vLLM / SGLang / TGI / Ollama / llama-server, a ``shunter worker``)."""

from backends.openai.backend import OpenAICompatBackend, OpenAICompatSettings

__all__ = ["OpenAICompatBackend", "OpenAICompatSettings"]
