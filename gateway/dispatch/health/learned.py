"""Context windows learned from the deployments themselves.

A deployment that rejects a prompt as too long (an upstream's 400 ``context_length_exceeded``,
llama.cpp's own length check, Anthropic's "prompt is too long") says how long its context
really is, often in so many words: :func:`context_limit_in` reads the number from what it
said. The gateway keeps that limit for the deployment (:class:`ContextLimits`), so the
``capable`` filter skips it for prompts that long, and ``shunter route`` shows it. A limit
is forgotten after :data:`LEARNED_TTL_S`, and with the deployment when its settings change,
in case the upstream's model changed under the same name.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable

from gateway.errors import GatewayError

LEARNED_TTL_S = 3600.0
# how upstreams name their limit: OpenAI/vLLM/llama.cpp, Mistral, Anthropic, TGI-style
# servers, llama.cpp embeddings, llama-server's error body
_LIMIT_PATTERNS = tuple(
    re.compile(pattern, re.IGNORECASE)
    for pattern in (
        r"maximum context length is (\d[\d,]*)",
        r"(\d[\d,]*) maximum context length",
        r"tokens? > (\d[\d,]*) maximum",
        r"must be <= (\d[\d,]*)",
        r"at most (\d[\d,]*) tokens",
        r"\"n_ctx\"\s*:\s*(\d+)",
    )
)


def context_limit_in(error: GatewayError) -> int | None:
    """The context length a deployment's rejection names, if it names one."""
    for text in (error.message, error.upstream_body or ""):
        for pattern in _LIMIT_PATTERNS:
            found = pattern.search(text)
            if found is not None:
                return int(found.group(1).replace(",", "")) or None
    return None


class ContextLimits:
    """Learned context lengths (tokens) per deployment name; ``clock`` for tests."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._limits: dict[str, tuple[int, float]] = {}

    def get(self, name: str) -> int | None:
        """The limit learned for ``name`` and still fresh, if any."""
        entry = self._limits.get(name)
        if entry is None:
            return None
        if self._clock() >= entry[1]:
            del self._limits[name]
            return None
        return entry[0]

    def fresh(self) -> dict[str, int]:
        """Every limit still fresh, by deployment name (the stale ones are forgotten)."""
        if not self._limits:
            return {}
        now = self._clock()
        self._limits = {n: entry for n, entry in self._limits.items() if now < entry[1]}
        return {n: limit for n, (limit, _) in self._limits.items()}

    def learn(self, name: str, limit: int, ttl_s: float = LEARNED_TTL_S) -> None:
        """Record that ``name`` holds at most ``limit`` tokens (the smaller limit wins)."""
        current = self.get(name)
        if current is None or limit < current:
            self._limits[name] = limit, self._clock() + ttl_s

    def remaining_s(self, name: str) -> float:
        """How long the limit learned for ``name`` stays (0 when there is none)."""
        entry = self._limits.get(name)
        return max(0.0, entry[1] - self._clock()) if entry else 0.0

    def keep_only(self, names: Iterable[str]) -> None:
        """Forget every deployment but ``names`` (a reload changed or removed the others)."""
        kept = set(names)
        self._limits = {n: entry for n, entry in self._limits.items() if n in kept}
