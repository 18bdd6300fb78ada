"""Two replicas' dispatchers sharing breakers, probes and learned limits through one real
state store (in memory, and a redis-server)."""

from __future__ import annotations

import asyncio

from gateway.config import parse_config
from gateway.dispatch import Gateway, ReplicaSync
from gateway.state import StateStore
from tests.gateway.scripted import ScriptedBackend

CONFIG = """
deployments:
  - {name: a, backend: llamacpp, model: a.gguf}
models:
  m: {candidates: [a]}
reliability: {failure_threshold: 1, cooldown_s: 30, probe_interval_s: 0.3}
"""


def replicas(store: StateStore, config_text: str = CONFIG) -> tuple[ReplicaSync, ReplicaSync]:
    config = parse_config(config_text, "test.yaml")
    first = Gateway(config, {"a": ScriptedBackend("a")})
    second = Gateway(config, {"a": ScriptedBackend("a")})
    return ReplicaSync(store, first), ReplicaSync(store, second)


async def test_one_replica_probes_a_deployment_per_interval(store: StateStore) -> None:
    first, second = replicas(store)
    assert await first.claim_probe("a")
    assert not await second.claim_probe("a")
    assert not await first.claim_probe("a")
    await asyncio.sleep(0.35)  # the interval is over
    assert await second.claim_probe("a")


async def test_a_passed_probe_half_opens_every_replica(store: StateStore) -> None:
    first, second = replicas(store)
    for sync in (first, second):
        sync.gateway.breakers["a"].record_failure()
        assert sync.gateway.breakers["a"].state == "open"
    first.gateway.breakers["a"].probe_passed()
    await first.probe_passed("a")
    await second.sync()
    assert second.gateway.breakers["a"].state == "half_open"


async def test_an_opening_older_than_a_success_is_not_adopted(store: StateStore) -> None:
    first, second = replicas(store)
    first.gateway.breakers["a"].record_failure()
    await first.sync()  # publishes the opening
    await second.sync()
    assert second.gateway.breakers["a"].state == "open"  # a fresh opening is adopted
    second.gateway.breakers["a"].probe_passed()
    second.gateway.breakers["a"].record_success()  # it answered here since
    await first.sync()  # still open there: published again, with its old start
    await second.sync()
    assert second.gateway.breakers["a"].state == "closed"


async def test_a_learned_context_length_is_shared(store: StateStore) -> None:
    first, second = replicas(store)
    first.gateway.context_limits.learn("a", 8192)
    await first.sync()
    await second.sync()
    assert second.gateway.context_limits.get("a") == 8192
    second.gateway.context_limits.learn("a", 4096)
    await second.sync()
    await first.sync()
    assert first.gateway.context_limits.get("a") == 4096


async def test_one_replica_takes_the_half_open_trial_and_the_others_wait_on_it(
    store: StateStore,
) -> None:
    first, second = replicas(store, CONFIG.replace("cooldown_s: 30", "cooldown_s: 0.2"))
    breakers = [sync.gateway.breakers["a"] for sync in (first, second)]
    for sync, breaker in zip((first, second), breakers, strict=True):
        breaker.record_failure()
        await sync.sync()  # gives the breaker its shared trial
    await asyncio.sleep(0.25)  # the cooldown is over in both
    assert [b.state for b in breakers] == ["half_open", "half_open"]
    assert await breakers[0].admit()
    assert not await breakers[1].admit()  # the first holds the trial
    assert [b.state for b in breakers] == ["half_open", "open"]
    breakers[0].record_success()  # the trial passed
    await first.sync()
    await second.sync()
    assert [b.state for b in breakers] == ["closed", "closed"]


async def _started(store: StateStore, config_text: str) -> tuple[ReplicaSync, ReplicaSync]:
    """Two replicas that have started (each read the store once, listens for notices) and
    publish nothing more on their own: a tick comes only once a minute."""
    config = parse_config(config_text, "test.yaml")
    syncs = []
    for _ in range(2):
        sync = ReplicaSync(store, Gateway(config, {"a": ScriptedBackend("a")}), interval_s=60)
        await sync.start()
        syncs.append(sync)
    return syncs[0], syncs[1]


async def _stop(*syncs: ReplicaSync) -> None:
    for sync in syncs:
        await sync.stop()


async def test_a_replica_that_starts_takes_the_fleets_open_breaker(store: StateStore) -> None:
    first, second = replicas(store)
    first.gateway.breakers["a"].record_failure()
    await first.sync()  # the fleet holds it open
    await second.start()  # a worker that starts (or is started again) reads it first
    try:
        assert second.gateway.breakers["a"].state == "open"
        assert second.gateway.breakers["a"].retry_in() > 5  # the fleet's opening, not a new one
    finally:
        await second.stop()


async def test_failures_in_a_row_count_across_replicas(store: StateStore) -> None:
    first, second = await _started(
        store, CONFIG.replace("failure_threshold: 1", "failure_threshold: 3")
    )
    try:
        breakers = [sync.gateway.breakers["a"] for sync in (first, second)]
        await breakers[0].fail()
        await breakers[1].fail()
        assert [b.state for b in breakers] == ["closed", "closed"]
        await breakers[0].fail()  # the third in a row, one of them elsewhere
        assert breakers[0].state == "open"
    finally:
        await _stop(first, second)


async def test_a_success_anywhere_ends_the_shared_run(store: StateStore) -> None:
    first, second = await _started(
        store, CONFIG.replace("failure_threshold: 1", "failure_threshold: 3")
    )
    try:
        breakers = [sync.gateway.breakers["a"] for sync in (first, second)]
        await breakers[0].fail()
        breakers[1].record_success()  # the deployment answered there since
        await second.sync()  # which ends the run
        assert await store.shared_get("failures:{a}") is None
        await breakers[1].fail()
        breakers[1].record_success()
        await breakers[1].fail()  # its own success restarts the run at once
        await breakers[0].fail()  # two here, two there: never three in a row
        assert [b.state for b in breakers] == ["closed", "closed"]
        await breakers[1].fail()
        assert breakers[1].state == "open"  # three in a row: two there, one here
    finally:
        await _stop(first, second)


async def test_an_opening_reaches_the_other_replicas_at_once(store: StateStore) -> None:
    first, second = await _started(store, CONFIG)
    try:
        await asyncio.sleep(0.3)  # both listen
        await first.gateway.breakers["a"].fail()
        for _ in range(100):  # a notice, not the next tick (a minute away)
            if second.gateway.breakers["a"].state == "open":
                break
            await asyncio.sleep(0.02)
        assert second.gateway.breakers["a"].state == "open"
    finally:
        await _stop(first, second)


async def test_a_replica_starts_half_open_while_the_fleet_waits_on_a_trial(
    store: StateStore,
) -> None:
    fast = CONFIG.replace("cooldown_s: 30", "cooldown_s: 0.2, max_cooldown_s: 0.2")
    first, second = replicas(store, fast)
    await first.start()
    try:
        await first.gateway.breakers["a"].fail()  # counted and published
        await asyncio.sleep(0.3)  # the opening is over: half-open, no trial yet
        await second.start()
        assert second.gateway.breakers["a"].state == "half_open"
        assert await first.gateway.breakers["a"].admit()  # the first takes the trial
        assert not await second.gateway.breakers["a"].admit()  # the second waits on it
    finally:
        await _stop(first, second)
