"""Session budgets hold before the call: a burst of concurrent requests of one session,
through `shunter serve --workers 2` on a real redis-server, in front of a slow priced
loopback upstream. Each request may cost $0.02 at most and costs exactly that, so a
$0.10 session budget lets exactly five in, whichever worker takes them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.fault_upstream import FaultUpstream
from tests.redis_server import RedisServer

MASTER = "sk-master-session-burst"
TOKEN_USD = 0.001
BUDGET_USD = 0.10
ALLOWED = 5
REQUESTS = 30


@pytest.fixture(scope="module")
def upstream() -> Iterator[FaultUpstream]:
    with FaultUpstream() as up:
        yield up


@pytest.fixture(scope="module")
def workers(
    redis_server: RedisServer, upstream: FaultUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("session-burst")
    config = folder / "shunter.yaml"
    config.write_text(
        "deployments:\n"
        f"  - name: slow\n    backend: openai\n    base_url: '{upstream.url}/v1'\n"
        "    model: 'fault:slow:20'\n"
        f"    price: {{input_per_1m: 0, output_per_1m: {TOKEN_USD * 1e6:.0f}}}\n"
        "models:\n  m: {candidates: [slow]}\n"
    )
    env = {"SHUNTER_REDIS_URL": redis_server.url, "SHUNTER_MASTER_KEY": MASTER}
    server = start_server(config, folder / "server.log", env=env, args=["--workers", "2"])
    yield server
    stop_server(server)


async def stream_one(client: httpx.AsyncClient, server: Server, key: str) -> tuple[int, int, str]:
    """One streamed request of session ``burst``: status, completion tokens, error code."""
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 20,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    headers = {"authorization": f"Bearer {key}", "session_id": "burst"}
    url = f"{server.api}/chat/completions"
    async with client.stream("POST", url, json=body, headers=headers) as response:
        if response.status_code != 200:
            return response.status_code, 0, json.loads(await response.aread())["error"]["code"]
        tokens = 0
        async for line in response.aiter_lines():
            if line.startswith("data: {"):
                usage = json.loads(line[6:]).get("usage")
                tokens = usage["completion_tokens"] if usage else tokens
        return 200, tokens, ""


async def burst(server: Server, key: str) -> list[tuple[int, int, str]]:
    # one connection per request, so that the kernel spreads them over both workers
    limits = httpx.Limits(max_connections=REQUESTS, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        return await asyncio.gather(*(stream_one(client, server, key) for _ in range(REQUESTS)))


def test_a_burst_of_one_session_spends_exactly_its_budget(
    redis_server: RedisServer, workers: Server
) -> None:
    key = redis_server.create_key(
        "--name", "burst", "--session-budget-usd", str(BUDGET_USD), "--session-rpm", "1000"
    )
    outcomes = asyncio.run(burst(workers, key))
    served = [tokens for status, tokens, _ in outcomes if status == 200]
    assert len(served) == ALLOWED
    assert {(s, c) for s, _, c in outcomes if s != 200} == {(429, "session_budget_exceeded")}
    master = {"authorization": f"Bearer {MASTER}"}
    rows = httpx.get(f"{workers.base_url}/ui/status.json", headers=master).json()["sessions"]
    (row,) = [r for r in rows if r["label"] == "burst"]
    assert row["spent_usd"] == pytest.approx(sum(served) * TOKEN_USD)
    assert row["spent_usd"] <= BUDGET_USD + 1e-9
    assert row["requests"] == ALLOWED
    # nothing stays held: the session is spent, and says so without a retry
    late = httpx.post(
        f"{workers.api}/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20},
        headers={"authorization": f"Bearer {key}", "session_id": "burst"},
        timeout=30,
    )
    assert late.status_code == 429 and late.headers.get("x-should-retry") == "false"
    assert "burst" in late.json()["error"]["message"]
