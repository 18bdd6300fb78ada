"""Virtual keys: hashed storage, master key, open mode, and OpenAI-shaped 401/403s."""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from gateway.admission.keys import (
    ANONYMOUS,
    MASTER,
    MAX_CACHED_MISSES,
    KeyRing,
    auth_configured,
    bearer_token,
    hash_secret,
)
from gateway.errors import AuthenticationError, PermissionDeniedError, ServiceUnavailableError
from gateway.state import MemoryStateStore, StateSettings, StateStore
from gateway.state.base import StateUnavailable
from gateway.state.redis import RedisStateStore
from tests.redis_server import RedisServer


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def test_bearer_token_parsing() -> None:
    assert bearer_token("Bearer sk-shunter-abc") == "sk-shunter-abc"
    assert bearer_token("bearer  sk-shunter-abc ") == "sk-shunter-abc"
    assert bearer_token("Basic dXNlcjpwYXNz") is None
    assert bearer_token("Bearer ") is None
    assert bearer_token(None) is None


async def test_open_mode_without_keys_or_master_key() -> None:
    ring = KeyRing(MemoryStateStore())
    assert not await ring.auth_enabled()
    assert await ring.authenticate(None, "any") is ANONYMOUS
    assert await ring.authenticate("Bearer EMPTY", "any") is ANONYMOUS


async def test_master_key_is_an_admin_for_every_model() -> None:
    ring = KeyRing.from_env(MemoryStateStore(), {"SHUNTER_MASTER_KEY": "sk-master-1"})
    assert await ring.auth_enabled()
    assert await ring.authenticate("Bearer sk-master-1", "whatever") is MASTER
    with pytest.raises(AuthenticationError) as wrong:
        await ring.authenticate("Bearer sk-master-2", "whatever")
    assert wrong.value.status_code == 401
    assert wrong.value.to_body()["error"]["code"] == "invalid_api_key"
    with pytest.raises(AuthenticationError, match="didn't provide an API key"):
        await ring.authenticate(None, "whatever")


async def test_keys_are_stored_hashed_and_authenticate(store: StateStore) -> None:
    ring = KeyRing(store)
    secret, record = await ring.create("ci", models=("tiny",), rpm=10, tpm=1000)
    assert secret.startswith("sk-shunter-") and len(secret) > 40
    assert record.secret_hash == hashlib.sha256(secret.encode()).hexdigest()
    stored = await store.key_get(hash_secret(secret))
    assert stored is not None and secret not in stored
    assert all(secret not in raw for raw in await store.key_list())

    assert await ring.auth_enabled()
    info = await ring.authenticate(f"Bearer {secret}", "tiny")
    assert (info.id, info.name, info.rpm, info.tpm, info.admin) == (
        record.id,
        "ci",
        10,
        1000,
        False,
    )
    assert info.scope == f"key:{record.id}"


async def test_unknown_and_missing_keys_get_401(store: StateStore) -> None:
    ring = KeyRing(store)
    await ring.create("ci")
    for header in (None, "Bearer sk-shunter-not-a-key", "Basic abc"):
        with pytest.raises(AuthenticationError) as caught:
            await ring.authenticate(header, "tiny")
        error = caught.value
        assert error.status_code == 401
        assert error.to_body()["error"]["type"] == "invalid_request_error"
        assert error.to_body()["error"]["code"] == "invalid_api_key"
        assert error.headers() == {"x-should-retry": "false"}


async def test_model_not_allowed_expired_and_revoked_get_403() -> None:
    clock = Clock()
    ring = KeyRing(MemoryStateStore(), clock=clock, cache_ttl_s=0)
    secret, record = await ring.create("ci", models=("tiny",), expires_in_s=3600)
    with pytest.raises(PermissionDeniedError) as caught:
        await ring.authenticate(f"Bearer {secret}", "big")
    assert caught.value.status_code == 403
    assert caught.value.to_body()["error"] == {
        "message": "This API key may not use the model 'big'.",
        "type": "permission_error",
        "param": "model",
        "code": "model_not_allowed",
    }

    clock.now += 3601
    with pytest.raises(PermissionDeniedError) as expired:
        await ring.authenticate(f"Bearer {secret}", "tiny")
    assert expired.value.code == "key_expired"

    clock.now -= 3601
    revoked = await ring.revoke(record.id)
    assert revoked is not None and revoked.status(clock.now) == "revoked"
    with pytest.raises(PermissionDeniedError) as caught_revoked:
        await ring.authenticate(f"Bearer {secret}", "tiny")
    assert caught_revoked.value.code == "key_revoked"
    assert await ring.revoke("key_unknown") is None
    assert [r.status(clock.now) for r in await ring.list_keys()] == ["revoked"]


async def test_a_revocation_reaches_another_replica_within_the_cache_ttl(
    redis_server: RedisServer,
) -> None:
    clock = Clock()
    stores = [RedisStateStore.from_url(redis_server.url, prefix="t-revoke") for _ in range(2)]
    admin, replica = KeyRing(stores[0], clock=clock), KeyRing(stores[1], clock=clock)
    secret, record = await admin.create("ci")
    assert (await replica.authenticate(f"Bearer {secret}", "m")).id == record.id
    await admin.revoke(record.id)
    # still cached on the replica...
    assert (await replica.authenticate(f"Bearer {secret}", "m")).id == record.id
    clock.now += 5
    with pytest.raises(PermissionDeniedError):
        await replica.authenticate(f"Bearer {secret}", "m")
    for store in stores:
        await store.aclose()


async def test_store_outage_keeps_known_keys_and_refuses_unknown_ones(
    own_redis: RedisServer,
) -> None:
    server = own_redis
    clock = Clock()
    store = RedisStateStore.from_url(server.url, prefix="t", probe_interval_s=0.05)
    ring = KeyRing(store, clock=clock)
    secret, _ = await ring.create("ci")
    other, _ = await ring.create("other")
    await ring.authenticate(f"Bearer {secret}", "m")
    server.stop()
    try:
        clock.now += 60  # the cached record is stale, and the store cannot refresh it
        assert (await ring.authenticate(f"Bearer {secret}", "m")).name == "ci"
        with pytest.raises(ServiceUnavailableError) as caught:
            await ring.authenticate(f"Bearer {other}", "m")
        assert caught.value.status_code == 503
        assert caught.value.code == "auth_unavailable"
        assert caught.value.headers()["retry-after"] == "2"
    finally:
        await store.aclose()


async def test_auth_configured_tells_the_cli_whether_to_stay_on_loopback(
    redis_server: RedisServer,
) -> None:
    settings = StateSettings(redis_url=redis_server.url, key_prefix="t-configured")
    assert not await auth_configured(StateSettings(), {})
    assert await auth_configured(StateSettings(), {"SHUNTER_MASTER_KEY": "sk-m"})
    assert not await auth_configured(settings, {})
    store = RedisStateStore.from_url(redis_server.url, prefix="t-configured")
    await KeyRing(store).create("first")
    await store.aclose()
    assert await auth_configured(settings, {})


async def test_a_ring_that_started_with_keys_never_turns_open(own_redis: RedisServer) -> None:
    clock = Clock()
    store = RedisStateStore.from_url(own_redis.url, prefix="t", probe_interval_s=0.05)
    ring = KeyRing(store, clock=clock)
    secret, _ = await ring.create("ci")
    assert await ring.auth_enabled()  # decided at start: keys required
    try:
        assert (own_redis.command("FLUSHALL") or "").startswith("+OK")
        clock.now += 60  # past every cache
        assert await store.key_count() == 0
        assert await ring.auth_enabled()
        for header in (None, "Bearer anything", f"Bearer {secret}"):
            with pytest.raises(AuthenticationError):
                await ring.identify(header)
        own_redis.stop()  # and while the store is away: no key, no entry
        with pytest.raises(AuthenticationError):
            await ring.identify(None)
        with pytest.raises(ServiceUnavailableError):
            await ring.identify("Bearer sk-shunter-unknown")
    finally:
        await store.aclose()


async def test_an_open_ring_turns_auth_on_for_good_once_a_key_exists(
    own_redis: RedisServer,
) -> None:
    clock = Clock()
    store = RedisStateStore.from_url(own_redis.url, prefix="t")
    ring = KeyRing(store, clock=clock, cache_ttl_s=5)
    assert await ring.identify(None) is ANONYMOUS  # decided at start: open
    secret, record = await KeyRing(store, clock=clock).create("first")
    assert await ring.identify(None) is ANONYMOUS  # looked at less than cache_ttl_s ago
    clock.now += 5
    with pytest.raises(AuthenticationError):
        await ring.identify(None)
    assert (await ring.identify(f"Bearer {secret}")).id == record.id
    assert (own_redis.command("FLUSHALL") or "").startswith("+OK")
    clock.now += 60
    with pytest.raises(AuthenticationError):  # never back to open
        await ring.identify(None)
    await store.aclose()


async def test_a_store_unreadable_at_start_means_keys_are_required(
    own_redis: RedisServer,
) -> None:
    clock = Clock()
    store = RedisStateStore.from_url(own_redis.url, prefix="t", probe_interval_s=0.05)
    ring = KeyRing(store, clock=clock)
    own_redis.stop()
    try:
        assert await ring.auth_enabled()  # cannot know whether keys exist: they are required
        assert await auth_configured(StateSettings(redis_url=own_redis.url), {})
        with pytest.raises(AuthenticationError):
            await ring.identify(None)
        with pytest.raises(ServiceUnavailableError) as caught:
            await ring.identify("Bearer sk-shunter-x")
        assert caught.value.code == "auth_unavailable"
        assert caught.value.headers()["retry-after"] == "2"
        own_redis.start()  # back, and empty: still no way in without a key
        assert await _answers(store)
        clock.now += 60
        with pytest.raises(AuthenticationError):
            await ring.identify(None)
    finally:
        await store.aclose()


async def test_random_keys_do_not_push_valid_ones_out_of_the_cache() -> None:
    ring = KeyRing(MemoryStateStore(), clock=Clock(), cache_ttl_s=60)
    secret, _ = await ring.create("ci")
    await ring.identify(f"Bearer {secret}")  # cached
    for i in range(MAX_CACHED_MISSES + 50):
        with pytest.raises(AuthenticationError):
            await ring.identify(f"Bearer sk-shunter-random-{i}")
    # an empty store from here on: only a cached record can still say who "ci" is
    ring.store = MemoryStateStore()
    assert (await ring.identify(f"Bearer {secret}")).name == "ci"


async def _answers(store: RedisStateStore, timeout_s: float = 10.0) -> bool:
    """Wait until the store answers again after an outage."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while asyncio.get_running_loop().time() < deadline:
        try:
            await store.key_count()
            return True
        except StateUnavailable:
            await asyncio.sleep(0.05)
    return False
