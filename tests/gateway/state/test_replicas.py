"""Two replicas, one Redis: a key's RPM limit holds exactly across them."""

from __future__ import annotations

import asyncio
import json
import sys
from asyncio.subprocess import PIPE
from pathlib import Path

from gateway.admission.admit import Admission
from gateway.admission.keys import KeyRing
from gateway.admission.limits import Budgets, Limiter, LimitExceededError
from gateway.state.redis import RedisStateStore
from policies import RequestFacts
from tests.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[3]
RPM = 25  # one request per 2.4 s refills: the test's bursts finish well within that


async def test_two_stores_in_one_process_share_the_limit_exactly(
    redis_server: RedisServer,
) -> None:
    stores = [RedisStateStore.from_url(redis_server.url, prefix="t-two") for _ in range(2)]
    gates = [Admission(KeyRing(s), Limiter(s), Budgets(s)) for s in stores]
    secret, _ = await gates[0].keys.create("shared", rpm=RPM)
    facts = RequestFacts(prompt_tokens=1, max_tokens=1)
    key = await gates[0].authenticate(f"Bearer {secret}")

    async def attempt(gate: Admission) -> bool:
        try:
            await gate.admit("tiny", facts, key)
        except LimitExceededError:
            return False
        return True

    results = await asyncio.gather(*(attempt(gates[i % 2]) for i in range(2 * RPM)))
    assert sum(results) == RPM
    for store in stores:
        await store.aclose()


async def test_two_processes_share_one_rpm_limit_exactly(redis_server: RedisServer) -> None:
    store = RedisStateStore.from_url(redis_server.url, prefix="t-procs")
    secret, _ = await KeyRing(store).create("shared", rpm=RPM)
    await store.aclose()

    command = ["-m", "tests.gateway.state.replica_worker", redis_server.url, "t-procs", str(RPM)]
    replicas = [
        await asyncio.create_subprocess_exec(
            sys.executable, *command, stdin=PIPE, stdout=PIPE, cwd=ROOT
        )
        for _ in range(2)
    ]
    try:
        for replica in replicas:
            assert replica.stdin is not None
            replica.stdin.write(f"{secret}\n".encode())
        for replica in replicas:
            assert await _line(replica) == "ready"
        for replica in replicas:
            assert replica.stdin is not None
            replica.stdin.write(b"go\n")
        results = [json.loads(await _line(replica)) for replica in replicas]
    finally:
        for replica in replicas:
            if replica.returncode is None:
                replica.kill()
            await replica.wait()
    # each replica alone would admit RPM requests; together they admit RPM, not 2 x RPM
    assert sum(r["admitted"] for r in results) == RPM, results
    assert [r["local_fallbacks"] for r in results] == [0, 0]


async def _line(process: asyncio.subprocess.Process) -> str:
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), timeout=30)
    if not line:
        raise RuntimeError(f"replica exited early with {await process.wait()}")
    return line.decode().strip()
