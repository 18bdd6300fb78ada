"""Shunter: an OpenAI-compatible, multi-backend LLM inference gateway."""

__version__ = "0.1.0"
