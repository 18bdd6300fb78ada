"""CORS for browser clients: which web pages may call the gateway, from the ``cors:`` section.

Off by default: without ``allow_origins`` no CORS header is sent and no preflight is
answered, so browsers keep pages on other sites from reading any answer. With origins
listed, preflights (``OPTIONS``) are answered before routing and answers carry
``Access-Control-Allow-Origin`` for those origins.

CORS only tells the browser what a page may read; who may *use* the gateway is still the
:class:`~gateway.http.guard.RequestGuard`'s and the keys' decision. In open mode (no API
keys) the guard refuses pages of other origins, except those listed here one by one: the
operator has named them. A ``*`` lets any page read answers, but in open mode the guard
still refuses origins that are not listed (a page anyone can visit must not use an
unauthenticated gateway); with API keys, ``*`` serves any page that holds a key.
"""

from __future__ import annotations

from litestar.config.cors import CORSConfig

from gateway.config import CORSSettings

METHODS: list[str] = ["GET", "POST", "DELETE"]


def cors_config(settings: CORSSettings) -> CORSConfig | None:
    """Litestar's CORS configuration for ``settings``; ``None`` when CORS is off."""
    if not settings.enabled:
        return None
    return CORSConfig(
        allow_origins=list(settings.allow_origins),
        allow_methods=METHODS,  # type: ignore[arg-type]  # Litestar's Method literals
        allow_headers=list(settings.allow_headers),
        expose_headers=list(settings.expose_headers),
        allow_credentials=False,  # callers authenticate with a bearer key, never cookies
        max_age=settings.max_age_s,
    )


def trusted_origins(settings: CORSSettings) -> frozenset[bytes]:
    """The ``Origin`` values the guard lets through in open mode: those listed by name."""
    return frozenset(origin.encode("latin-1") for origin in settings.listed_origins)
