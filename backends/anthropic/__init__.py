"""Anthropic's Messages API behind the OpenAI chat contract: the backend
(:mod:`~backends.anthropic.backend`), its settings (:mod:`~backends.anthropic.settings`),
the request and answer translation (:mod:`~backends.anthropic.wire`), the stream events
(:mod:`~backends.anthropic.stream`) and the Messages pass-through
(:mod:`~backends.anthropic.native`)."""

from backends.anthropic.backend import AnthropicBackend
from backends.anthropic.settings import AnthropicSettings

__all__ = ["AnthropicBackend", "AnthropicSettings"]
