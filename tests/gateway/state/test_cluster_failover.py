"""A real Redis Cluster loses a primary under load, and nothing acknowledged is lost.

Six ``redis-server`` nodes (three primaries, three replicas), two ``shunter serve
--workers 2`` on ``redis+cluster://``, a scripted upstream whose every answer has the same
usage (so each call costs the same), and six keys: four with an RPM limit, a budget and a
session budget (money: fail-closed), two with an RPM limit only (fail-open). Their clients
loop over a chat completion, a stored response and a turn of a conversation, across both
gateways. A few seconds in, the primary that holds the key records is killed (SIGKILL);
its replica is promoted. Afterwards: every key, stored response and conversation item that
was acknowledged is there, and each key's and session's recorded spend is exactly what the
upstream served it. The errors of the failover window are printed (run with ``-s``).

Opt-in (about a minute, four gateway processes and six Redis nodes): ``SHUNTER_STACK=1``;
``scripts/test-stack.sh`` runs it after the compose stack.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest

from gateway.admission.keys import KeyRing, KeySessionLimits
from gateway.state import StateSettings, open_store
from gateway.state.base import StateStore
from tests.conftest import Server, start_server, stop_server
from tests.fixtures.scripted_upstream import ScriptedUpstream, Turn
from tests.gateway.state.cluster_load import Load, User, errors_by_phase, served_by_user
from tests.redis_cluster import RedisCluster

pytestmark = [
    pytest.mark.stack,
    pytest.mark.skipif(os.environ.get("SHUNTER_STACK") != "1", reason="set SHUNTER_STACK=1"),
]
MASTER = "sk-master-cluster"
UNIT_USD = 11 * 1000 / 1e6 + 7 * 2000 / 1e6  # the upstream's usage at the prices below
SETTLE_S = 3.0  # after the promotion: each worker's store retries at most a second later
RUN_AFTER_S = 6.0  # the load goes on this long after the promotion


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    nodes = RedisCluster(tmp_path_factory.mktemp("cluster"))
    try:
        yield nodes.start()
    finally:
        nodes.stop()


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream(script=[Turn(text="ok")]) as up:
        yield up


@pytest.fixture(scope="module")
def gateways(
    cluster: RedisCluster, upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[Server]]:
    folder = tmp_path_factory.mktemp("gateways")
    config = folder / "shunter.yaml"
    config.write_text(
        "deployments:\n"
        f"  - {{name: up, backend: openai, base_url: '{upstream.url}', model: scripted,\n"
        "     price: {input_per_1m: 1000, output_per_1m: 2000}}\n"
        "models:\n  m: {candidates: [up]}\n"
    )
    env = {"SHUNTER_REDIS_URL": cluster.url, "SHUNTER_MASTER_KEY": MASTER}
    servers: list[Server] = []
    try:
        for name in ("first", "second"):
            log = folder / f"{name}.log"
            servers.append(start_server(config, log, env=env, args=["--workers", "2"]))
        yield servers
    finally:
        for server in servers:
            stop_server(server)


def _store(cluster: RedisCluster) -> StateStore:
    return open_store(StateSettings.from_env(redis_url=cluster.url))


def _cli_key(cluster: RedisCluster) -> str:
    """A key made by `shunter keys create` on the cluster URL, as an operator would."""
    command = [sys.executable, "-m", "gateway.cli", "keys", "create", "--redis-url", cluster.url]
    args = ["--name", "cli", "--rpm", "600", "--budget", "100", "--session-budget-usd", "50"]
    done = subprocess.run([*command, *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


async def _users(cluster: RedisCluster) -> list[User]:
    store = _store(cluster)
    ring = KeyRing(store)
    session = KeySessionLimits(budget_usd=50)
    users = [User(0, _cli_key(cluster), fail_open=False)]
    for i in range(1, 6):
        if i < 4:
            made = await ring.create(f"u{i}", rpm=600, budget_usd=100, session=session)
        else:
            made = await ring.create(f"u{i}", rpm=600)
        users.append(User(i, made[0], fail_open=i >= 4))
    await store.aclose()
    return users


async def _new_keys(cluster: RedisCluster, stop: asyncio.Event) -> tuple[list[str], int]:
    """Keys created while the load runs: the ids acknowledged, and the refusals."""
    store = _store(cluster)
    ring = KeyRing(store)
    made, refused = [], 0
    while not stop.is_set():
        try:
            made.append((await ring.create(f"during-{len(made)}"))[1].id)
        except Exception:
            refused += 1
        await asyncio.sleep(0.1)
    await store.aclose()
    return made, refused


async def test_a_primary_lost_under_load_loses_nothing_acknowledged(
    cluster: RedisCluster, upstream: ScriptedUpstream, gateways: list[Server]
) -> None:
    users = await _users(cluster)
    load = Load([g.base_url for g in gateways], users)
    running = asyncio.gather(load.run(), _new_keys(cluster, load.stop))
    await asyncio.sleep(3.0)
    victim = cluster.primary_of("shunter:{keys}:ids")
    killed = time.monotonic()
    cluster.kill(victim)
    promoted = killed + await asyncio.to_thread(cluster.wait_promoted)
    await asyncio.sleep(RUN_AFTER_S)
    load.stop.set()
    _, (new_keys, refused) = await running
    phases = errors_by_phase(load.outcomes, killed, promoted, SETTLE_S)
    _report(load, phases, promoted - killed, len(new_keys), refused)

    lost = await _lost(cluster, gateways[0], users, new_keys)
    spend = await _spend(cluster, users)
    served = served_by_user(upstream.bodies)
    _report_books(users, lost, spend, served, gateways)
    assert lost == {}, lost
    assert not phases["before"] and not phases["after"], phases
    for user in users:
        if user.fail_open:
            continue
        assert spend[user.index][0] == pytest.approx(served[user.index] * UNIT_USD, abs=1e-9)
        assert spend[user.index][1] == pytest.approx(served[user.index] * UNIT_USD, abs=1e-9)
    # keys without money limits: their rate limits fail open (local counters), so they
    # are served throughout; only a worker that had never seen such a key cannot tell it
    # from a forged one while the key records are away (503 auth_unavailable)
    opened = [o for o in load.outcomes if o.kind == "chat" and users[o.user].fail_open]
    assert {(o.status, o.code) for o in opened} <= {(200, ""), (503, "auth_unavailable")}
    assert any(killed <= o.sent <= promoted and o.status == 200 for o in opened)


async def _lost(
    cluster: RedisCluster, gateway: Server, users: list[User], new_keys: list[str]
) -> dict[str, list[str]]:
    """What was acknowledged and cannot be found now, by what it was."""
    store = _store(cluster)
    listed = {json.loads(r)["id"] for r in await store.key_list()}
    await store.aclose()
    lost: dict[str, list[str]] = {"keys": [k for k in new_keys if k not in listed]}
    lost["responses"], lost["items"] = [], []
    async with httpx.AsyncClient(base_url=gateway.api, timeout=30) as client:
        for user in users:
            auth = {"authorization": f"Bearer {user.secret}"}
            for response_id, text in user.stored.items():
                got = await client.get(f"/responses/{response_id}", headers=auth)
                if got.status_code != 200 or text not in got.text:
                    lost["responses"].append(f"{response_id}: {got.status_code}")
            count = await _items(client, user.conversation, auth)
            if count != 2 * user.turns:
                lost["items"].append(f"{user.conversation}: {count} of {2 * user.turns}")
    return {what: found for what, found in lost.items() if found}


async def _items(client: httpx.AsyncClient, conversation: str, auth: dict[str, str]) -> int:
    """How many items the conversation has (-1 when it cannot be read), page by page."""
    count, after = 0, None
    while True:
        params = {"limit": 100, **({"after": after} if after else {})}
        page = await client.get(f"/conversations/{conversation}/items", params=params, headers=auth)
        if page.status_code != 200:
            return -1
        data = page.json()
        count += len(data["data"])
        if not data.get("has_more") or not data["data"]:
            return count
        after = data["data"][-1]["id"]


async def _spend(cluster: RedisCluster, users: list[User]) -> dict[int, tuple[float, float]]:
    """Each user's recorded spend: its key's budget window, and its session's books."""
    store = _store(cluster)
    ring = KeyRing(store)
    books = await store.session_top(100)
    spend = {}
    for user in users:  # each user's requests carry one session id: its key has one session
        record = await ring.authenticate(f"Bearer {user.secret}", "m")
        key = (await store.spend_get(f"key:{record.id}", record.budget_window_s)).usd
        session = [use.usd for use in books if use.scope.startswith(f"session:{record.id}:")]
        spend[user.index] = (key, sum(session))
    await store.aclose()
    return spend


def _report(
    load: Load, phases: dict[str, Counter[str]], failover_s: float, new_keys: int, refused: int
) -> None:
    took = sorted(o.took for o in load.outcomes)
    print(
        f"\ncluster failover: {len(load.outcomes)} requests, a replica promoted "
        f"{failover_s:.2f} s after the primary was killed; slowest answer {took[-1]:.2f} s; "
        f"keys created during the run: {new_keys} acknowledged, {refused} refused"
    )
    for phase, errors in phases.items():
        print(f"  errors {phase}: {dict(errors) if errors else 'none'}")


def _report_books(
    users: list[User],
    lost: dict[str, list[str]],
    spend: dict[int, tuple[float, float]],
    served: Counter[int],
    gateways: list[Server],
) -> None:
    stored = sum(len(u.stored) for u in users)
    turns = sum(u.turns for u in users)
    print(
        f"  afterwards: {stored} stored responses, {turns} conversation turns; "
        f"lost: {lost or 'nothing'}"
    )
    for user in users:
        if not user.fail_open:
            key, books = spend[user.index]
            print(
                f"  key {user.index}: upstream served {served[user.index]} calls = "
                f"${served[user.index] * UNIT_USD:.3f}; recorded: key ${key:.3f}, "
                f"session ${books:.3f}"
            )
    logs = "".join(g.log() for g in gateways)
    print(
        f"  settlements the store missed: {logs.count('spend_not_recorded_yet')}, "
        f"written later: {logs.count('spend_recorded')}"
    )
