"""``/mcp`` sessions of the 2025 protocol revisions (``Mcp-Session-Id``), which any worker
or replica accepts without sticky sessions: an id is signed, not stored.

An id is ``s1.<expiry>.<nonce>.<key>.<hmac>``: an expiry (Unix seconds), a random nonce,
a fingerprint of the gateway key it was issued to (another key cannot use it), and their
HMAC. The secret is ``mcp.session_secret`` when the config sets one, else derived from the
master key, else one made once and kept in the shared state store (every replica reads the
same). Ending a session (``DELETE /mcp``) stores its nonce until the expiry, as the status
page's sign-out does.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import os
import time

from gateway.state.base import StateStore, StateUnavailable

SESSION_TTL_S = 24 * 3600
SECRET_TTL_S = 365 * 24 * 3600
_SECRET_KEY = "mcp:session-secret"
_SECRET_LOCK = "mcp:session-secret-lock"
_ENDED = "mcp:ended:"
_MAX_ID = 200


class McpSessions:
    """Issues, checks and ends session ids; one per app."""

    def __init__(self, store: StateStore, secret: bytes | None = None) -> None:
        self.store = store
        self._secret = secret
        self._lock = asyncio.Lock()

    async def issue(self, key_id: str, now: float | None = None) -> str:
        """A new session id for the key ``key_id``."""
        expires = int((now or time.time()) + SESSION_TTL_S)
        return _signed(await self._key(), expires, os.urandom(12).hex(), _fingerprint(key_id))

    async def check(self, session_id: str, key_id: str, now: float | None = None) -> bool:
        """Whether ``session_id`` was issued to ``key_id``, has not expired nor ended."""
        nonce = _nonce(await self._key(), session_id, key_id, now or time.time())
        if nonce is None:
            return False
        try:
            return await self.store.shared_get(_ENDED + nonce) is None
        except StateUnavailable:
            return True  # the store down: an unexpired, signed id still serves

    async def end(self, session_id: str, key_id: str) -> bool:
        """End ``session_id`` on every replica; whether it was a valid session."""
        now = time.time()
        nonce = _nonce(await self._key(), session_id, key_id, now)
        if nonce is None:
            return False
        expires = int(session_id.split(".")[1])
        with contextlib.suppress(StateUnavailable):
            await self.store.shared_set(_ENDED + nonce, "1", max(1.0, expires - now))
        return True

    async def _key(self) -> bytes:
        if self._secret is None:
            async with self._lock:
                if self._secret is None:
                    self._secret = await _shared_secret(self.store)
        return self._secret


async def _shared_secret(store: StateStore) -> bytes:
    """The secret kept in the store; the first replica to look makes it (the others wait
    for it a moment)."""
    for _ in range(50):
        found = await store.shared_get(_SECRET_KEY)
        if found:
            return bytes.fromhex(found)
        if await store.shared_incr(_SECRET_LOCK, 1, 10.0) == 1:
            secret = os.urandom(32)
            await store.shared_set(_SECRET_KEY, secret.hex(), SECRET_TTL_S)
            return secret
        await asyncio.sleep(0.05)
    raise StateUnavailable("no MCP session secret in the state store")


def _fingerprint(key_id: str) -> str:
    return hashlib.sha256(key_id.encode()).hexdigest()[:16]


def _signed(secret: bytes, expires: int, nonce: str, key: str) -> str:
    body = f"s1.{expires}.{nonce}.{key}"
    return f"{body}.{hmac.new(secret, body.encode(), hashlib.sha256).hexdigest()}"


def _nonce(secret: bytes, session_id: str, key_id: str, now: float) -> str | None:
    """The nonce of a valid, unexpired id issued to ``key_id``; anything else: ``None``."""
    if not session_id or len(session_id) > _MAX_ID or not session_id.isascii():
        return None
    parts = session_id.split(".")
    if len(parts) != 5 or parts[0] != "s1" or not parts[1].isdigit() or len(parts[1]) > 12:
        return None
    expires, nonce = int(parts[1]), parts[2]
    if expires <= now or not nonce.isalnum():
        return None
    expected = _signed(secret, expires, nonce, _fingerprint(key_id))
    return nonce if hmac.compare_digest(expected, session_id) else None
