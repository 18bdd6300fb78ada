"""Redis Cluster safety: every operation runs on a one-node cluster, where Redis refuses
any command or script whose keys span two hash slots (CROSSSLOT)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from gateway.admission.keys import KeyRing
from gateway.admission.limits import Budgets, Limiter, RateLimit
from gateway.state import StateSettings, open_store
from gateway.state.base import SessionCaps
from gateway.state.redis import RedisStateStore
from gateway.state.redis_client import cluster_url, connect
from tests.conftest import free_port
from tests.redis_server import RedisServer, start_redis


@pytest.fixture(scope="module")
def cluster_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = start_redis(tmp_path_factory.mktemp("redis-cluster"), cluster=True)
    yield server
    server.stop()


async def test_the_server_really_refuses_cross_slot_scripts(cluster_server: RedisServer) -> None:
    client = Redis.from_url(cluster_server.url)
    try:
        with pytest.raises(ResponseError, match="same slot"):
            await client.eval("return redis.call('MGET', KEYS[1], KEYS[2])", 2, "a", "b")
        assert await client.eval("return 1", 2, "{x}:a", "{x}:b") == 1
    finally:
        await client.aclose()


@pytest.mark.parametrize("cluster_client", [True, False], ids=["cluster-client", "plain-client"])
async def test_every_store_operation_is_single_slot(
    cluster_server: RedisServer, cluster_client: bool
) -> None:
    # the plain client sends everything as is, so the server itself checks the slots
    settings = StateSettings(
        redis_url=cluster_server.url, redis_cluster=cluster_client, key_prefix=f"c{cluster_client}"
    )
    store = open_store(settings)
    assert isinstance(store, RedisStateStore)
    try:
        limiter = Limiter(store)
        grant = await limiter.reserve("key:a", "k", RateLimit(rpm=5, tpm=100), 40)
        await limiter.reconcile(grant, 10)
        await limiter.release(grant)
        budgets = Budgets(store)
        await budgets.add("key:a", 3600, 0.5)
        assert (await budgets.check("key:a", "k", 1.0, 3600)).usd == pytest.approx(0.5)
        ring = KeyRing(store)
        secret, record = await ring.create("ci", rpm=5)
        assert (await ring.authenticate(f"Bearer {secret}", "m")).id == record.id
        assert [r.id for r in await ring.list_keys()] == [record.id]
        assert await ring.revoke(record.id) is not None
        await store.cache_set("c", b"v", 10)
        assert await store.cache_get("c") == b"v"
        assert await store.shared_incr("deployment:a:fails", 1, 10) == 1
        await store.shared_set("deployment:a:cooldown", "1", 10)
        assert await store.shared_get("deployment:a:cooldown") == "1"
        caps = SessionCaps(budget_usd=1.0, max_tokens=100)
        assert (await store.session_hold("session:k:s", "h1", 0.5, 10, caps)).allowed
        await store.session_settle("session:k:s", "h1", 0.25, 5, 60.0)
        await store.session_stop("session:k:t", "loop", 60.0, (("label", "t"),))
        assert [u.scope for u in await store.session_top(5)] == ["session:k:s", "session:k:t"]
        for i in range(4):  # the oldest two make room, each in a slot of its own
            assert await store.bounded_set("responses", f"responses:r{i}", "x" * 10, 60, 25)
        assert await store.bounded_bytes("responses") == 20
        assert [await store.shared_get(f"responses:r{i}") for i in (0, 1)] == [None, None]
        await store.bounded_delete("responses", "responses:r3")
        assert await store.bounded_bytes("responses") == 10
        assert await store.ping()
        assert store.health.errors == 0
    finally:
        await store.aclose()


async def test_a_cluster_url_names_several_nodes_and_any_live_one_will_do(
    cluster_server: RedisServer,
) -> None:
    # the first node named is down (a free port): the client asks the next one
    dead = free_port()
    url = f"redis+cluster://127.0.0.1:{dead},127.0.0.1:{cluster_server.port}/0"
    store = open_store(StateSettings.from_env(redis_url=url))
    assert isinstance(store, RedisStateStore)
    try:
        secret, record = await KeyRing(store).create("multi")
        assert (await KeyRing(store).authenticate(f"Bearer {secret}", "m")).id == record.id
        assert store.health.errors == 0
    finally:
        await store.aclose()


def test_a_plain_url_stays_a_single_node_client() -> None:
    assert cluster_url("redis://127.0.0.1:6379/0") == ("redis://127.0.0.1:6379/0", False)
    assert cluster_url("rediss+cluster://:pw@h:7000/0") == ("rediss://:pw@h:7000/0", True)
    assert isinstance(connect("redis://127.0.0.1:6379/0"), Redis)
