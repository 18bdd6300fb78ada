"""What a backend can do beyond chat and completions, asked in one place: the endpoints
check an optional ability here before they use it."""

from __future__ import annotations

from backends.base import Backend, EmbeddingsBackend
from gateway.ingress.messages import MessagesBackend, TokenCounter
from gateway.protocol.frames import RawChatBackend


def raw_chat(backend: Backend) -> RawChatBackend | None:
    """The backend, if it hands over its upstream's chat frames untouched."""
    return backend if isinstance(backend, RawChatBackend) else None


def embedder(backend: Backend) -> EmbeddingsBackend | None:
    """The backend, if it serves embeddings."""
    if isinstance(backend, EmbeddingsBackend) and backend.capabilities.embeddings:
        return backend
    return None


def native_messages(backend: Backend) -> MessagesBackend | None:
    """The backend, if its upstream speaks Anthropic's Messages API itself."""
    return backend if isinstance(backend, MessagesBackend) else None


def token_counter(backend: Backend) -> TokenCounter | None:
    """The backend, if it counts a chat request's prompt tokens exactly."""
    return backend if isinstance(backend, TokenCounter) else None
