"""Conversations: lists of Responses items that responses continue and add to.

One record per conversation, under ``conversations:<id>`` in the gateway's state store (in
memory, or Redis shared by every worker and replica, as stored responses are): the API key
that created it (another key gets a 404, as for an id that never existed), its
``created_at``, ``metadata`` and ``items``, each item as the Responses API lists it (with
its ``id``). A response created with ``conversation`` reads the items before its input,
and once finished adds its input and output items. A record expires ``ttl_s`` after its
last change. Two changes of one conversation at the same moment keep the later one.

Bounds: conversations are counted with the stored responses, under the same
``responses.max_bytes`` (the state store counts both; the oldest records are deleted first
to make room), and one conversation is at most as large as a request body
(:data:`~gateway.apis.contract.MAX_BODY_BYTES`): a change that would pass it is refused by
name (``conversation_too_large``). A large record is decoded off the event loop.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from gateway.apis.contract import MAX_BODY_BYTES
from gateway.apis.responses.store import DEFAULT_MAX_BYTES, GROUP, decoded, refuse_larger
from gateway.errors import InvalidRequestError, NotFoundError, ServiceUnavailableError
from gateway.protocol import now
from gateway.state.base import StateStore, StateUnavailable

DEFAULT_TTL_S = 30 * 86_400.0


def _key(conversation_id: str) -> str:
    return f"conversations:{conversation_id}"


def conversation_object(record: dict[str, Any]) -> dict[str, Any]:
    """The ``conversation`` object of a record."""
    return {
        "id": record["id"],
        "object": "conversation",
        "created_at": record["created_at"],
        "metadata": record.get("metadata") or {},
    }


class ConversationStore:
    """Conversations on a :class:`StateStore`, each readable only by its owner."""

    def __init__(
        self,
        state: StateStore,
        ttl_s: float = DEFAULT_TTL_S,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_record: int = MAX_BODY_BYTES,
    ) -> None:
        self.state = state
        self.ttl_s = ttl_s
        self.max_bytes = max_bytes
        self.max_record = max_record

    async def create(
        self, owner: str, items: list[dict[str, Any]], metadata: dict[str, str]
    ) -> dict[str, Any]:
        """A new conversation of ``owner`` holding ``items``."""
        record = {
            "id": f"conv_{uuid.uuid4().hex}",
            "owner": owner,
            "created_at": now(),
            "metadata": metadata,
            "items": items,
        }
        await self.save(record)
        return record

    async def load(
        self,
        conversation_id: str,
        owner: str,
        param: str | None = None,
        max_bytes: int | None = None,
    ) -> dict[str, Any]:
        """The record of ``conversation_id`` if ``owner`` created it; else 404 (400 when it
        is larger than ``max_bytes``, checked before it is read)."""
        try:
            if max_bytes is not None:
                await refuse_larger(self.state, _key(conversation_id), max_bytes, param)
            raw = await self.state.shared_get(_key(conversation_id))
        except StateUnavailable:
            raise _unavailable() from None
        record = await decoded(raw)
        if not isinstance(record, dict) or record.get("owner") != owner:
            raise NotFoundError(
                f"Conversation with id '{conversation_id[:128]}' not found.", param=param
            )
        return record

    async def save(self, record: dict[str, Any], param: str | None = None) -> None:
        """Store ``record``; a 400 naming ``param`` when it would be larger than one
        conversation may be, or than the store keeps."""
        value = json.dumps(record, ensure_ascii=False)
        size = len(value.encode())
        limit = min(self.max_record, self.max_bytes)
        if size > limit:
            raise InvalidRequestError(
                f"The conversation would hold {size} bytes; at most {limit} are kept. "
                "Start a new conversation (or compact this one).",
                param=param,
                code="conversation_too_large",
            )
        try:
            kept = await self.state.bounded_set(
                GROUP, _key(record["id"]), value, self.ttl_s, self.max_bytes
            )
        except StateUnavailable:
            raise _unavailable() from None
        if not kept:
            raise _unavailable()

    async def delete(self, conversation_id: str, owner: str) -> None:
        """Delete ``conversation_id`` (404 unless ``owner`` created it)."""
        await self.load(conversation_id, owner)
        try:
            await self.state.bounded_delete(GROUP, _key(conversation_id))
        except StateUnavailable:
            raise _unavailable() from None

    async def append(
        self,
        conversation_id: str,
        owner: str,
        items: list[dict[str, Any]],
        param: str | None = None,
    ) -> None:
        """Add ``items`` at the end of the conversation (a 400 naming ``param`` when it
        would grow past its bound)."""
        record = await self.load(conversation_id, owner, param)
        record["items"].extend(items)
        await self.save(record, param)


def item_of(record: dict[str, Any], item_id: str) -> dict[str, Any]:
    """The item ``item_id`` of a conversation (404 when it has none)."""
    for item in record["items"]:
        if item.get("id") == item_id:
            return dict(item)
    raise NotFoundError(f"Item with id '{item_id[:128]}' not found.")


def _unavailable() -> ServiceUnavailableError:
    return ServiceUnavailableError(
        "Conversations cannot be read or changed right now; retry shortly.",
        code="store_unavailable",
        retry_after=1.0,
    )
