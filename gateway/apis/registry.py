"""The client APIs the gateway serves, one line each. The app builds its routes, its
error shapes and its key sources from these, and nothing else: a new API is one package
under :mod:`gateway.apis` and one line here."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.apis import anthropic, gemini, mcp, openai, responses
from gateway.apis.contract import Api


def apis() -> tuple[Api, ...]:
    return (
        openai.api(),
        responses.api(),
        anthropic.api(),
        gemini.api(),
        mcp.api(),
    )


def api_of_path(served: Sequence[Api], path: str) -> Api | None:
    """The API whose prefix is the longest one ``path`` starts with, if any (for the
    shape of an error on a path no operation serves)."""
    best: tuple[int, Api | None] = (0, None)
    for api in served:
        for prefix in api.prefixes:
            if path.startswith(prefix) and len(prefix) > best[0]:
                best = (len(prefix), api)
    return best[1]
