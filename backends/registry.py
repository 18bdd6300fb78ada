"""Backend kinds: the settings model each deployment kind validates with, and its factory.

Adding a backend is one module, one entry in :data:`DeploymentConfig` and one in
:func:`_factories`. Factories import their module lazily, so an engine that is not
installed (vLLM) costs nothing until a config asks for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from backends.base import Backend
from backends.llamacpp import LlamaCppSettings

# one member today: pydantic needs a Union for a discriminator, so it is added with the second
DeploymentConfig = LlamaCppSettings

BACKEND_KINDS: tuple[str, ...] = ("llamacpp",)


def _llamacpp(settings: Any) -> Backend:
    from backends.llamacpp import LlamaCppBackend

    return LlamaCppBackend(settings)


def _factories() -> dict[str, Callable[[Any], Backend]]:
    return {"llamacpp": _llamacpp}


def create_backend(settings: DeploymentConfig) -> Backend:
    """Build the backend for one deployment's validated settings."""
    return _factories()[settings.backend](settings)
