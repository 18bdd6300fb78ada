"""Anthropic's Messages API behind the OpenAI chat contract: the backend
(:mod:`~backends.anthropic.backend`), its settings (:mod:`~backends.anthropic.settings`),
the request and answer translation (:mod:`~backends.anthropic.wire`), the stream events
(:mod:`~backends.anthropic.stream`) and the Messages pass-through
(:mod:`~backends.anthropic.native`)."""

from typing import TYPE_CHECKING, Any

from backends.anthropic.settings import AnthropicSettings

if TYPE_CHECKING:
    from backends.anthropic.backend import AnthropicBackend


def __getattr__(name: str) -> Any:
    # the backend's modules load with the first deployment of this kind (see
    # backends.registry), not with the config schema that names every kind
    if name == "AnthropicBackend":
        from backends.anthropic.backend import AnthropicBackend

        return AnthropicBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["AnthropicBackend", "AnthropicSettings"]
