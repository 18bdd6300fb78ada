"""Stored responses: what ``previous_response_id``, ``GET`` and ``DELETE
/v1/responses/{id}`` read, kept in the gateway's state store (memory or Redis).

One record per response, under ``responses:<id>``: the API key that created it (another
key gets a 404, as for an id that never existed), the response object, its input items,
and the whole conversation as chat messages (earlier turns, this turn's input, its
output), so that a continuation is one read however long the chain. Instructions are not
part of the conversation (OpenAI does not carry them over either).

Bounds: every record expires ``ttl_s`` after it was written; a replica keeps at most
``max_bytes`` of the records it wrote (the oldest are deleted first to make room), and a
single conversation larger than that is not stored (its answer says ``store: false``).
A store that cannot be reached loses the write (logged); a lookup then answers 503.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from typing import Any

import structlog

from gateway.errors import InvalidRequestError, NotFoundError, ServiceUnavailableError
from gateway.state.base import StateStore, StateUnavailable

log = structlog.get_logger("shunter.responses")
DEFAULT_TTL_S = 86_400.0
DEFAULT_MAX_BYTES = 256 * 1024 * 1024


def _key(response_id: str) -> str:
    return f"responses:{response_id}"


async def refuse_larger(state: StateStore, key: str, max_bytes: int, param: str | None) -> None:
    """A 400 naming ``param`` when the stored value under ``key`` is larger than
    ``max_bytes``: a continuation is capped as one request body is, and its size is read
    from the store so that a huge history is never brought into memory."""
    size = await state.shared_size(key)
    if size > max_bytes:
        raise InvalidRequestError(
            f"The stored conversation ({size} bytes) with this request's input exceeds the "
            f"request size limit; start a new conversation.",
            param=param,
            code="conversation_too_large",
        )


class ResponseStore:
    """Stored responses on a :class:`StateStore`, each readable only by its owner."""

    def __init__(
        self,
        state: StateStore,
        ttl_s: float = DEFAULT_TTL_S,
        max_bytes: int = DEFAULT_MAX_BYTES,
        clock: Any = time.monotonic,
    ) -> None:
        self.state = state
        self.ttl_s = ttl_s
        self.max_bytes = max_bytes
        self._clock = clock
        self._written: OrderedDict[str, tuple[int, float]] = OrderedDict()
        self._bytes = 0

    async def load(
        self,
        response_id: str,
        owner: str,
        param: str | None = None,
        max_bytes: int | None = None,
    ) -> dict[str, Any]:
        """The record of ``response_id`` if ``owner`` created it; else 404 (503 when the
        store cannot be read; 400 when it is larger than ``max_bytes``, checked before it
        is read)."""
        try:
            if max_bytes is not None:
                await refuse_larger(self.state, _key(response_id), max_bytes, param)
            raw = await self.state.shared_get(_key(response_id))
        except StateUnavailable:
            raise ServiceUnavailableError(
                "Stored responses cannot be read right now; retry shortly.",
                code="store_unavailable",
                retry_after=1.0,
            ) from None
        record = json.loads(raw) if raw else None
        if not isinstance(record, dict) or record.get("owner") != owner:
            raise NotFoundError(f"Response with id '{response_id[:128]}' not found.", param=param)
        return record

    async def save(self, response_id: str, record: str) -> bool:
        """Store ``record`` (a JSON object with the ``owner``); False when it is too large
        or the store is down."""
        raw = record
        size = len(raw.encode())
        if size > self.max_bytes:
            log.warning("response_not_stored", response_id=response_id, bytes=size)
            return False
        await self._make_room(size)
        try:
            await self.state.shared_set(_key(response_id), raw, self.ttl_s)
        except StateUnavailable:
            log.warning("response_not_stored", response_id=response_id, reason="store down")
            return False
        self._written[response_id] = (size, self._clock() + self.ttl_s)
        self._bytes += size
        return True

    async def delete(self, response_id: str, owner: str) -> None:
        """Delete ``response_id`` (404 unless ``owner`` created it)."""
        await self.load(response_id, owner)
        try:
            await self.state.shared_delete(_key(response_id))
        except StateUnavailable:
            raise ServiceUnavailableError(
                "Stored responses cannot be changed right now; retry shortly.",
                code="store_unavailable",
                retry_after=1.0,
            ) from None
        self._forget(response_id)

    async def _make_room(self, size: int) -> None:
        now = self._clock()
        written = self._written
        while written:
            oldest, (_, expires) = next(iter(written.items()))
            if expires > now and self._bytes + size <= self.max_bytes:
                return
            self._forget(oldest)
            if expires > now:  # still stored: deleted to make room
                try:
                    await self.state.shared_delete(_key(oldest))
                except StateUnavailable:
                    return

    def _forget(self, response_id: str) -> None:
        entry = self._written.pop(response_id, None)
        if entry is not None:
            self._bytes -= entry[0]
