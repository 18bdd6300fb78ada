"""A 404 for a model the gateway does not serve, said with the models it does serve (those
the caller's key may use, the first :data:`MAX_LISTED`): a client that asked for a name it
guessed (Claude Code's own model ids, ``gpt-4o``) learns which to ask for."""

from __future__ import annotations

from gateway.admission.keys import KeyInfo, may_use
from gateway.errors import ModelNotFoundError

MAX_LISTED = 20


def list_served(exc: ModelNotFoundError, key: KeyInfo) -> None:
    """Add the served models ``key`` may use to ``exc``'s message, once."""
    if exc.listed:
        return
    exc.listed = True
    usable = [model for model in exc.served if may_use(key, model)]
    if not usable:
        return
    shown = ", ".join(usable[:MAX_LISTED])
    more = f" (and {len(usable) - MAX_LISTED} more)" if len(usable) > MAX_LISTED else ""
    exc.message = f"{exc.message} Models served: {shown}{more}."
