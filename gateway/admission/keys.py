"""Virtual API keys: create, list, revoke, and authenticate requests with them.

A key's secret (``sk-shunter-`` + 256 random bits) is shown once, at creation. The store keeps
only its SHA-256: for a high-entropy random secret a fast unsalted hash is enough (no
dictionary or brute-force attack is feasible), and it keeps lookup a single read.

A master key from ``SHUNTER_MASTER_KEY`` is an admin that may use every model. With no
master key and no virtual key stored, auth is off ("open mode"): every request is let in
as ``anonymous`` and the app must bind to loopback only (see :meth:`KeyRing.auth_enabled`).

Open mode is decided once, when the gateway starts, and is never entered afterwards: a
gateway that started with keys keeps requiring them when the store is emptied, flushed,
restarted without persistence or unreachable (unknown keys get 401, keys that cannot be
checked 503 ``auth_unavailable``). A store that cannot be read at start counts as holding
keys: whether it does cannot be known, so keys are required. A gateway that started open
turns auth on for good once a first key is stored (it looks every ``cache_ttl_s``);
nothing turns it off again.

Key records are cached in this process for ``cache_ttl_s`` (so a revocation reaches every
replica within that time), in two bounded LRU maps: keys found, and keys not found. A
flood of random keys only pushes out other unknown keys, never a valid one. While the
store is down, a cached record keeps working and an uncached key gets a 503: auth fails
closed.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
import secrets
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import structlog
from pydantic import BaseModel, ConfigDict, Field

from gateway.errors import AuthenticationError, PermissionDeniedError, ServiceUnavailableError
from gateway.state import StateSettings, open_store
from gateway.state.base import StateStore, StateUnavailable

MASTER_KEY_ENV = "SHUNTER_MASTER_KEY"
SECRET_PREFIX = "sk-shunter-"
MAX_CACHED_KEYS = 10_000  # records of keys that exist
MAX_CACHED_MISSES = 10_000  # hashes of keys that do not: bounded apart, so they evict each other
log = structlog.get_logger("shunter.keys")
_V = TypeVar("_V")
_NO_KEY = (
    "You didn't provide an API key. You need to provide your API key in an Authorization "
    "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
)


class KeySessionLimits(BaseModel):
    """A key's own limits for each of its sessions; unset ones take the config's
    (``sessions:``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    budget_usd: float | None = Field(default=None, gt=0)
    max_tokens: int | None = Field(default=None, ge=1)
    rpm: int | None = Field(default=None, ge=1)
    tpm: int | None = Field(default=None, ge=1)
    loop_repeats: int | None = Field(default=None, ge=2)

    def described(self) -> list[str]:
        """``session_budget=$5.00``-style parts for listings, of the limits that are set."""
        named = {
            "session_budget": None if self.budget_usd is None else f"${self.budget_usd:.2f}",
            "session_max_tokens": self.max_tokens,
            "session_rpm": self.rpm,
            "session_tpm": self.tpm,
            "session_loop_repeats": self.loop_repeats,
        }
        return [f"{name}={value}" for name, value in named.items() if value is not None]


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
    mcp: tuple[str, ...] | None = None
    """MCP servers (``server``) and tools (``server:tool``) the key may use; None: all."""
    rpm: int | None = Field(default=None, ge=1)
    tpm: int | None = Field(default=None, ge=1)
    budget_usd: float | None = Field(default=None, ge=0)
    budget_window_s: int = Field(default=30 * 86400, ge=1)
    session: KeySessionLimits | None = None

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
    mcp: tuple[str, ...] | None = None
    """MCP servers and ``server:tool`` entries the key may use; None: all."""
    session: KeySessionLimits | None = None

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
            mcp=record.mcp,
            session=record.session,
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
        self._found: OrderedDict[str, tuple[KeyRecord, float]] = OrderedDict()
        self._missing: OrderedDict[str, float] = OrderedDict()
        # None: not decided yet; True: keys required, for good; False: started open,
        # looking for a first key every cache_ttl_s
        self._required: bool | None = True if self._master else None
        self._looked_at = -math.inf

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
        mcp: tuple[str, ...] | None = None,
        session: KeySessionLimits | None = None,
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
            mcp=mcp,
            rpm=rpm,
            tpm=tpm,
            budget_usd=budget_usd,
            budget_window_s=budget_window_s,
            session=session,
        )
        await self.store.key_put(record.secret_hash, record.id, record.model_dump_json())
        self._missing.pop(record.secret_hash, None)
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
        self._found.pop(record.secret_hash, None)
        return record

    # -- request path -------------------------------------------------------------------
    async def auth_enabled(self) -> bool:
        """Whether requests need a key: decided on the first call (the app makes it at
        start) and then only ever turned on. A master key, a stored key, or a store that
        cannot be read turns it on for good; started open, a first stored key turns it on
        (checked every ``cache_ttl_s``)."""
        if self._required:
            return True
        return await self._keys_required()

    async def identify(self, authorization: str | None) -> KeyInfo:
        """Who sent this request, from its ``Authorization`` header alone (nothing of the
        body is needed, so a bad key is refused before the body is read).

        Raises :class:`AuthenticationError` (401, ``invalid_api_key``) for a missing or
        unknown key, :class:`PermissionDeniedError` (403) for a revoked or expired key,
        :class:`ServiceUnavailableError` (503, ``auth_unavailable``) when the key cannot
        be checked because the store is down.
        """
        token = bearer_token(authorization)
        if self._is_master(token):
            return MASTER
        if not (self._required or await self._keys_required()):
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
        return KeyInfo.of(record)

    async def authenticate(self, authorization: str | None, model: str) -> KeyInfo:
        """:meth:`identify`, then :func:`check_model` (403 for a model the key may not use)."""
        key = await self.identify(authorization)
        check_model(key, model)
        return key

    @property
    def has_master(self) -> bool:
        """Whether a master key is configured."""
        return self._master is not None

    def derived_secret(self, purpose: str) -> bytes | None:
        """A secret for ``purpose`` derived from the master key (``None`` without one): the
        same on every replica, and a new one whenever the master key changes."""
        if self._master is None:
            return None
        return hmac.new(self._master.encode(), purpose.encode(), hashlib.sha256).digest()

    def is_master(self, authorization: str | None) -> bool:
        """Whether the header carries the master key (never true without one)."""
        return self._is_master(bearer_token(authorization))

    def _is_master(self, token: str | None) -> bool:
        if token is None or self._master is None:
            return False
        return hmac.compare_digest(token.encode(), self._master.encode())

    async def _keys_required(self) -> bool:
        """See :meth:`auth_enabled`."""
        if self._required:
            return True
        now = self._clock()
        if self._required is False and now - self._looked_at < self._ttl:
            return False
        try:
            count = await self.store.key_count()
        except StateUnavailable:
            if self._required is None:  # whether keys exist cannot be known: require them
                log.warning("auth_undecidable", reason="state store unavailable; keys required")
                self._required = True
            return bool(self._required)  # started open: open until a key is seen
        self._looked_at = now
        if count > 0:
            if self._required is False:
                log.warning("auth_enabled", reason="a key was created; open mode is over")
            self._required = True
        elif self._required is None:
            self._required = False
        return self._required

    async def _lookup(self, key_hash: str) -> KeyRecord | None:
        now = self._clock()
        found = self._found.get(key_hash)
        if found is not None and now - found[1] < self._ttl:
            self._found.move_to_end(key_hash)
            return found[0]
        missed = self._missing.get(key_hash)
        if missed is not None and now - missed < self._ttl:
            return None
        try:
            raw = await self.store.key_get(key_hash)
        except StateUnavailable as exc:
            if found is not None:
                return found[0]
            raise _unavailable() from exc
        if raw is None:
            self._found.pop(key_hash, None)
            _remember(self._missing, key_hash, now, MAX_CACHED_MISSES)
            return None
        record = KeyRecord.model_validate_json(raw)
        self._missing.pop(key_hash, None)
        _remember(self._found, key_hash, (record, now), MAX_CACHED_KEYS)
        return record


def check_model(key: KeyInfo, model: str) -> None:
    """403 ``model_not_allowed`` unless ``key`` may use ``model``."""
    if key.models is not None and model not in key.models:
        raise PermissionDeniedError(
            f"This API key may not use the model '{_shown(model)}'.",
            param="model",
            code="model_not_allowed",
        )


def may_use(key: KeyInfo, model: str) -> bool:
    """Whether ``key`` may use ``model`` (what ``GET /v1/models`` lists for it)."""
    return key.models is None or model in key.models


def _shown(model: str, limit: int = 256) -> str:
    # a client's model name goes back into the message: a bounded copy of it
    return model if len(model) <= limit else model[:limit] + "..."


def _remember(cache: OrderedDict[str, _V], key: str, value: _V, bound: int) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > bound:
        cache.popitem(last=False)  # the least recently used


def _unavailable() -> ServiceUnavailableError:
    return ServiceUnavailableError(
        "API keys cannot be checked right now (the state store is unavailable).",
        code="auth_unavailable",
        retry_after=2,
        should_retry=True,
    )


async def auth_configured(
    settings: StateSettings, environ: Mapping[str, str] | None = None
) -> bool:
    """Whether a gateway started with ``settings`` will require API keys: there is a master
    key, or the store holds at least one key (or cannot be read: then it fails closed).
    Opens and closes a store of its own, so the CLI can decide before binding whether to
    stay on loopback (open mode)."""
    store = open_store(settings)
    try:
        return await KeyRing.from_env(store, environ).auth_enabled()
    finally:
        await store.aclose()
