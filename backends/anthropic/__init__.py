"""Anthropic's Messages API behind the OpenAI chat contract: the backend
(:mod:`~backends.anthropic.backend`), the request and answer translation
(:mod:`~backends.anthropic.wire`) and the stream events (:mod:`~backends.anthropic.stream`)."""

from backends.anthropic.backend import AnthropicBackend, AnthropicSettings

__all__ = ["AnthropicBackend", "AnthropicSettings"]
