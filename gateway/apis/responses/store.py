"""Stored responses: what ``previous_response_id``, ``GET`` and ``DELETE
/v1/responses/{id}`` read, kept in the gateway's state store (memory or Redis).

One record per response, under ``responses:<id>``: the API key that created it (another
key gets a 404, as for an id that never existed), the response object, its input items,
and the whole conversation as chat messages (earlier turns, this turn's input, its
output), so that a continuation is one read however long the chain. Instructions are not
part of the conversation (OpenAI does not carry them over either).

Bounds: every record expires ``ttl_s`` after it was written; the store keeps at most
``max_bytes`` of records in all, whichever worker or replica wrote them and across
restarts (the state store counts them; the oldest are deleted first to make room), and a
single conversation larger than that is not stored (its answer says ``store: false``).
A store that cannot be reached loses the write (logged); a lookup then answers 503.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import structlog

from gateway.errors import InvalidRequestError, NotFoundError, ServiceUnavailableError
from gateway.state.base import StateStore, StateUnavailable

log = structlog.get_logger("shunter.responses")
DEFAULT_TTL_S = 86_400.0
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
OFF_LOOP_BYTES = 256 * 1024  # a record this large is decoded in a thread
GROUP = "responses"
"""The state store's group of stored responses and conversations (one byte bound)."""


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
        self, state: StateStore, ttl_s: float = DEFAULT_TTL_S, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> None:
        self.state = state
        self.ttl_s = ttl_s
        self.max_bytes = max_bytes

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
            raise _unavailable("read") from None
        record = await decoded(raw)
        if not isinstance(record, dict) or record.get("owner") != owner:
            raise NotFoundError(f"Response with id '{response_id[:128]}' not found.", param=param)
        return record

    async def save(self, response_id: str, record: str) -> bool:
        """Store ``record`` (a JSON object with the ``owner``), the oldest stored responses
        of every process making room; False when it is too large or the store is down."""
        try:
            stored = await self.state.bounded_set(
                GROUP, _key(response_id), record, self.ttl_s, self.max_bytes
            )
        except StateUnavailable:
            log.warning("response_not_stored", response_id=response_id, reason="store down")
            return False
        if not stored:
            log.warning("response_not_stored", response_id=response_id, bytes=len(record))
        return stored

    async def delete(self, response_id: str, owner: str) -> None:
        """Delete ``response_id`` (404 unless ``owner`` created it)."""
        await self.load(response_id, owner)
        try:
            await self.state.bounded_delete(GROUP, _key(response_id))
        except StateUnavailable:
            raise _unavailable("changed") from None


async def decoded(raw: str | None) -> Any:
    """A stored record, decoded (off the event loop when it is large)."""
    if not raw:
        return None
    if len(raw) > OFF_LOOP_BYTES:
        return await asyncio.to_thread(json.loads, raw)
    return json.loads(raw)


def _unavailable(done: str) -> ServiceUnavailableError:
    return ServiceUnavailableError(
        f"Stored responses cannot be {done} right now; retry shortly.",
        code="store_unavailable",
        retry_after=1.0,
    )
