"""Google's Gemini API behind the OpenAI chat contract: the backend
(:mod:`~backends.gemini.backend`), its settings (:mod:`~backends.gemini.settings`), the
request translation (:mod:`~backends.gemini.wire`), answers and usage
(:mod:`~backends.gemini.answer`), stream events (:mod:`~backends.gemini.stream`), thought
signatures carried in tool call ids (:mod:`~backends.gemini.calls`) and Gemini's own
requests passed through (:mod:`~backends.gemini.native`)."""

from backends.gemini.backend import GeminiBackend
from backends.gemini.settings import GeminiSettings

__all__ = ["GeminiBackend", "GeminiSettings"]
