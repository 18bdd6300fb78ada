"""What a backend can do beyond chat and completions, asked in one place: the endpoints
check an optional ability here before they use it."""

from __future__ import annotations

from backends.base import Backend


def raw_chat(backend: Backend) -> Backend | None:
    """The backend, if it hands over its upstream's chat frames untouched."""
    return backend if backend.capabilities.chat_stream_raw else None


def embedder(backend: Backend) -> Backend | None:
    """The backend, if it serves embeddings."""
    return backend if backend.capabilities.embeddings else None


def native_messages(backend: Backend) -> Backend | None:
    """The backend, if its upstream speaks Anthropic's Messages API itself."""
    return backend if backend.capabilities.native_messages else None


def token_counter(backend: Backend) -> Backend | None:
    """The backend, if it counts a chat request's prompt tokens exactly."""
    return backend if backend.capabilities.count_tokens else None
