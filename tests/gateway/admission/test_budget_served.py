"""Budgets hold before the call: many concurrent requests on a small budget, through
`shunter serve --workers 2` on a real redis-server, in front of a slow loopback upstream.

Each answer is 20 tokens at $0.001 a token ($0.02), the most a request may cost
(``max_tokens: 20``), and streams for about 0.4 s, so every request is in flight together
with the others. A budget that were only checked would let all of them in."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.fault_upstream import FaultUpstream
from tests.redis_server import RedisServer

MASTER = "sk-master-budget"
TOKEN_USD = 0.001
WORST_USD = 20 * TOKEN_USD
BUDGET_USD = 0.05
REQUESTS = 50


@pytest.fixture(scope="module")
def upstream() -> Iterator[FaultUpstream]:
    with FaultUpstream() as up:
        yield up


@pytest.fixture(scope="module")
def workers(
    redis_server: RedisServer, upstream: FaultUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("budget-served")
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


async def stream_one(client: httpx.AsyncClient, server: Server, key: str) -> tuple[int, int]:
    """One streamed request: its status and the completion tokens its usage reported."""
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 20,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    headers = {"authorization": f"Bearer {key}"}
    url = f"{server.api}/chat/completions"
    async with client.stream("POST", url, json=body, headers=headers) as response:
        tokens = 0
        async for line in response.aiter_lines():
            if line.startswith("data: {"):
                usage = json.loads(line[6:]).get("usage")
                tokens = usage["completion_tokens"] if usage else tokens
        return response.status_code, tokens


async def all_at_once(server: Server, key: str) -> list[tuple[int, int]]:
    # one connection per request, so that the kernel spreads them over both workers
    limits = httpx.Limits(max_connections=REQUESTS, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        return await asyncio.gather(*(stream_one(client, server, key) for _ in range(REQUESTS)))


def spent_usd(redis: RedisServer, name: str) -> float:
    command = [sys.executable, "-m", "gateway.cli", "keys", "list", "--json"]
    listing = subprocess.run(
        [*command, "--redis-url", redis.url], capture_output=True, text=True, check=True
    ).stdout
    rows = [json.loads(line) for line in listing.splitlines() if line.startswith("{")]
    spent: float = next(r for r in rows if r["name"] == name)["spent_usd"]
    return spent


def test_concurrent_requests_cannot_spend_past_the_budget(
    redis_server: RedisServer, workers: Server
) -> None:
    key = redis_server.create_key("--name", "small-budget", "--budget", str(BUDGET_USD))
    outcomes = asyncio.run(all_at_once(workers, key))
    served = [tokens for status, tokens in outcomes if status == 200]
    refused = [status for status, _ in outcomes if status != 200]
    assert served and set(refused) == {429}
    charged = sum(served) * TOKEN_USD
    assert spent_usd(redis_server, "small-budget") == pytest.approx(charged)
    # the spend passes the budget by at most one request's worst case
    assert charged <= BUDGET_USD + WORST_USD + 1e-9
    # nothing stays held once every request has ended: one after another, requests are
    # served until the spend reaches the budget, then refused on the spend alone
    for _ in range(5):
        late = httpx.post(
            f"{workers.api}/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20},
            headers={"authorization": f"Bearer {key}"},
            timeout=30,
        )
        if late.status_code != 200:
            break
    assert late.status_code == 429
    assert late.json()["error"]["code"] == "insufficient_quota"
    assert spent_usd(redis_server, "small-budget") <= BUDGET_USD + WORST_USD + 1e-9
