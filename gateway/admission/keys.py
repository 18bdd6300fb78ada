"""Virtual API keys: create, list, revoke, and authenticate requests with them.

A key's secret (``sk-shunter-`` + 256 random bits) is shown once, at creation. The store keeps
only its SHA-256: for a high-entropy random secret a fast unsalted hash is enough (no
dictionary or brute-force attack is feasible), and it keeps lookup a single read.

A master key from ``SHUNTER_MASTER_KEY`` is an admin that may use every model. With no
master key and no virtual key stored, auth is off ("open mode"): every request is let in
as ``anonymous`` and the app must bind to loopback only (see :meth:`KeyRing.auth_enabled`).

Key records are cached in this process for ``cache_ttl_s`` (so a revocation reaches every
replica within that time). While the store is down, a cached record keeps working and
an uncached key gets a 503: auth fails closed.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from gateway.errors import AuthenticationError, PermissionDeniedError, ServiceUnavailableError
from gateway.state import StateSettings, open_store
from gateway.state.base import StateStore, StateUnavailable

MASTER_KEY_ENV = "SHUNTER_MASTER_KEY"
SECRET_PREFIX = "sk-shunter-"
_MAX_CACHED = 10_000
_NO_KEY = (
    "You didn't provide an API key. You need to provide your API key in an Authorization "
    "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
)


class KeyRecord(BaseModel):
    """A stored virtual key: never the secret, only its SHA-256."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    name: str
    secret_hash: str
    created_at: float
    expires_at: float | None = None
    revoked_at: float | None = None
    models: tuple[str, ...] | None = None
    rpm: int | None = Field(default=None, ge=1)
    tpm: int | None = Field(default=None, ge=1)
    budget_usd: float | None = Field(default=None, ge=0)
    budget_window_s: int = Field(default=30 * 86400, ge=1)

    def status(self, now: float) -> str:
        """``active``, ``expired`` or ``revoked`` at Unix time ``now``."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= now:
            return "expired"
        return "active"


@dataclass(frozen=True)
class KeyInfo:
    """Who is calling, and what they may do; what :meth:`KeyRing.authenticate` returns."""

    id: str
    name: str
    admin: bool = False
    models: tuple[str, ...] | None = None
    rpm: int | None = None
    tpm: int | None = None
    budget_usd: float | None = None
    budget_window_s: int = 30 * 86400

    @property
    def scope(self) -> str:
        """The state scope of this key's limits and spend."""
        return f"key:{self.id}"

    @classmethod
    def of(cls, record: KeyRecord) -> KeyInfo:
        """What a stored key may do."""
        return cls(
            id=record.id,
            name=record.name,
            models=record.models,
            rpm=record.rpm,
            tpm=record.tpm,
            budget_usd=record.budget_usd,
            budget_window_s=record.budget_window_s,
        )


MASTER = KeyInfo(id="master", name="master", admin=True)
ANONYMOUS = KeyInfo(id="anonymous", name="anonymous (open mode)")


def hash_secret(secret: str) -> str:
    """SHA-256 of a key's secret, hex."""
    return hashlib.sha256(secret.encode()).hexdigest()


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


class KeyRing:
    """Virtual keys in a :class:`StateStore`, plus the optional master key."""

    def __init__(
        self,
        store: StateStore,
        *,
        master_key: str | None = None,
        cache_ttl_s: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self._master = master_key or None
        self._ttl = cache_ttl_s
        self._clock = clock
        self._cache: dict[str, tuple[KeyRecord | None, float]] = {}
        self._enabled: tuple[bool, float] | None = None

    @classmethod
    def from_env(
        cls,
        store: StateStore,
        environ: Mapping[str, str] | None = None,
        *,
        cache_ttl_s: float = 5.0,
    ) -> KeyRing:
        """A key ring whose master key comes from ``SHUNTER_MASTER_KEY``."""
        env = os.environ if environ is None else environ
        master = env.get(MASTER_KEY_ENV) or None
        return cls(store, master_key=master, cache_ttl_s=cache_ttl_s)

    # -- management (the CLI) -------------------------------------------------------------
    async def create(
        self,
        name: str,
        *,
        models: tuple[str, ...] | None = None,
        rpm: int | None = None,
        tpm: int | None = None,
        budget_usd: float | None = None,
        budget_window_s: int = 30 * 86400,
        expires_in_s: float | None = None,
    ) -> tuple[str, KeyRecord]:
        """Create a key; return ``(secret, record)``. The secret is not stored anywhere."""
        secret = SECRET_PREFIX + secrets.token_urlsafe(32)
        now = self._clock()
        record = KeyRecord(
            id=f"key_{uuid.uuid4().hex[:12]}",
            name=name,
            secret_hash=hash_secret(secret),
            created_at=now,
            expires_at=None if expires_in_s is None else now + expires_in_s,
            models=models,
            rpm=rpm,
            tpm=tpm,
            budget_usd=budget_usd,
            budget_window_s=budget_window_s,
        )
        await self.store.key_put(record.secret_hash, record.id, record.model_dump_json())
        return secret, record

    async def list_keys(self) -> list[KeyRecord]:
        """Every key, oldest first (no secrets: there are none to show)."""
        records = [KeyRecord.model_validate_json(r) for r in await self.store.key_list()]
        return sorted(records, key=lambda r: (r.created_at, r.id))

    async def revoke(self, key_id: str) -> KeyRecord | None:
        """Mark a key revoked; None if no key has that id. Revoking twice keeps the first time."""
        found = await self.store.key_find(key_id)
        if found is None:
            return None
        record = KeyRecord.model_validate_json(found[1])
        if record.revoked_at is None:
            record = record.model_copy(update={"revoked_at": self._clock()})
            await self.store.key_put(record.secret_hash, record.id, record.model_dump_json())
        self._cache.pop(record.secret_hash, None)
        return record

    # -- request path -------------------------------------------------------------------
    async def auth_enabled(self) -> bool:
        """True with a master key or any stored key. Cached for ``cache_ttl_s``; while the
        store is down the last answer stands, and with none yet auth counts as enabled."""
        if self._master is not None:
            return True
        now = self._clock()
        if self._enabled is not None and now - self._enabled[1] < self._ttl:
            return self._enabled[0]
        try:
            enabled = await self.store.key_count() > 0
        except StateUnavailable:
            return True if self._enabled is None else self._enabled[0]
        self._enabled = (enabled, now)
        return enabled

    async def authenticate(self, authorization: str | None, model: str) -> KeyInfo:
        """Who sent this request, if they may use ``model``.

        Raises :class:`AuthenticationError` (401, ``invalid_api_key``) for a missing or
        unknown key, :class:`PermissionDeniedError` (403) for a revoked or expired key or a
        model the key may not use, :class:`ServiceUnavailableError` (503) when the key
        cannot be checked because the store is down.
        """
        token = bearer_token(authorization)
        if self._is_master(token):
            return MASTER
        if not await self.auth_enabled():
            return ANONYMOUS
        if token is None:
            raise AuthenticationError(_NO_KEY)
        record = await self._lookup(hash_secret(token))
        if record is None:
            raise AuthenticationError(
                "Incorrect API key provided. Check the key, or ask the gateway's operator "
                "for one (shunter keys create)."
            )
        status = record.status(self._clock())
        if status != "active":
            raise PermissionDeniedError(f"This API key is {status}.", code=f"key_{status}")
        if record.models is not None and model not in record.models:
            raise PermissionDeniedError(
                f"This API key may not use the model '{model}'.",
                param="model",
                code="model_not_allowed",
            )
        return KeyInfo.of(record)

    def _is_master(self, token: str | None) -> bool:
        if token is None or self._master is None:
            return False
        return hmac.compare_digest(token.encode(), self._master.encode())

    async def _lookup(self, key_hash: str) -> KeyRecord | None:
        now = self._clock()
        cached = self._cache.get(key_hash)
        if cached is not None and now - cached[1] < self._ttl:
            return cached[0]
        try:
            raw = await self.store.key_get(key_hash)
        except StateUnavailable as exc:
            if cached is not None and cached[0] is not None:
                return cached[0]
            raise ServiceUnavailableError(
                "API keys cannot be checked right now (the state store is unavailable).",
                code="auth_unavailable",
                retry_after=2,
                should_retry=True,
            ) from exc
        record = None if raw is None else KeyRecord.model_validate_json(raw)
        if len(self._cache) >= _MAX_CACHED:
            self._cache.clear()
        self._cache[key_hash] = (record, now)
        return record


async def auth_configured(
    settings: StateSettings, environ: Mapping[str, str] | None = None
) -> bool:
    """Whether a gateway started with ``settings`` will require API keys: there is a master
    key, or the store holds at least one key. Opens and closes a store of its own, so the
    CLI can decide before binding whether to stay on loopback (open mode)."""
    store = open_store(settings)
    try:
        return await KeyRing.from_env(store, environ).auth_enabled()
    finally:
        await store.aclose()
