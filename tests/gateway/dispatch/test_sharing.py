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
