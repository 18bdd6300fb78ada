"""Request bodies being received, bounded in sum and per key.

Each body is capped on its own (:data:`~gateway.http.intake.MAX_BODY_BYTES`), but many slow
uploads at once each hold a buffer for up to the body deadline. The bytes buffered by
bodies still arriving are counted here, per process: past the key's share the body is a
429 (one key's uploads cannot starve the others), past the whole a 503; both retryable.
A body's bytes are counted while it arrives and released once it is whole or abandoned:
after that the requests running at once (``--max-in-flight``) bound what is held.
"""

from __future__ import annotations

from gateway.errors import RateLimitError, ServiceUnavailableError


class BodyBuffers:
    """The bytes of bodies being received: ``total`` in all, ``per_key`` for one key."""

    def __init__(self, total: int, per_key: int) -> None:
        self.total = total
        self.per_key = per_key
        self.held = 0
        self._by_key: dict[str, int] = {}

    def lease(self, key_id: str) -> BodyLease:
        """A body's account, for the key that sends it."""
        return BodyLease(self, key_id)

    def key_bytes(self, key_id: str) -> int:
        """What ``key_id``'s bodies hold now."""
        return self._by_key.get(key_id, 0)

    def take(self, key_id: str, size: int) -> None:
        """Count ``size`` more bytes for ``key_id``; raise when a bound would be passed."""
        own = self._by_key.get(key_id, 0)
        if own + size > self.per_key:
            raise RateLimitError(
                f"This key's request bodies still arriving hold {own} bytes; at most "
                f"{self.per_key} at once. Retry when they have arrived.",
                code="body_buffers_full",
                retry_after=1.0,
                should_retry=True,
            )
        if self.held + size > self.total:
            raise ServiceUnavailableError(
                "The gateway is receiving too many request bodies at once; retry shortly.",
                code="body_buffers_full",
                retry_after=1.0,
                should_retry=True,
            )
        self._by_key[key_id] = own + size
        self.held += size

    def give_back(self, key_id: str, size: int) -> None:
        """``size`` bytes of ``key_id`` no longer count."""
        left = self._by_key.get(key_id, 0) - size
        if left > 0:
            self._by_key[key_id] = left
        else:
            self._by_key.pop(key_id, None)
        self.held -= size


class BodyLease:
    """One body's bytes in :class:`BodyBuffers`; :meth:`release` when it is read."""

    def __init__(self, buffers: BodyBuffers, key_id: str) -> None:
        self._buffers = buffers
        self._key_id = key_id
        self.size = 0

    def take(self, size: int) -> None:
        """Count ``size`` more bytes of the body (raises when the bound would be passed)."""
        self._buffers.take(self._key_id, size)
        self.size += size

    def release(self) -> None:
        """The body is whole or abandoned: its bytes no longer count."""
        if self.size:
            self._buffers.give_back(self._key_id, self.size)
            self.size = 0
