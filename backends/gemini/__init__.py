"""Google's Gemini API behind the OpenAI chat contract: the backend
(:mod:`~backends.gemini.backend`), its settings (:mod:`~backends.gemini.settings`), the
request translation (:mod:`~backends.gemini.wire`), answers and usage
(:mod:`~backends.gemini.answer`), stream events (:mod:`~backends.gemini.stream`), thought
signatures carried in tool call ids (:mod:`~backends.gemini.calls`) and Gemini's own
requests passed through (:mod:`~backends.gemini.native`)."""

from typing import TYPE_CHECKING, Any

from backends.gemini.settings import GeminiSettings

if TYPE_CHECKING:
    from backends.gemini.backend import GeminiBackend


def __getattr__(name: str) -> Any:
    # the backend's modules load with the first deployment of this kind (see
    # backends.registry), not with the config schema that names every kind
    if name == "GeminiBackend":
        from backends.gemini.backend import GeminiBackend

        return GeminiBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["GeminiBackend", "GeminiSettings"]
