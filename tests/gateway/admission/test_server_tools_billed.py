"""Server tools an Anthropic upstream runs are billed: through the Messages pass-through of
a real `shunter serve` on a real redis-server, in front of a scripted Anthropic upstream on
loopback that reports ``usage.server_tool_use``, a key's budget holds each server tool's
``max_uses`` at its price before the call and is charged the uses reported after it, whole
and streamed; a deployment priced for its tokens only bills them at Anthropic's published
prices."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import Server, start_server, stop_server
from tests.fixtures.anthropic_upstream import AnthropicUpstream
from tests.redis_server import RedisServer

MASTER = "sk-master-server-tools"
SEARCH_USD = 0.01  # Anthropic's web search: $10 per 1,000
TOKENS_ONLY = "{input_per_1m: 3, output_per_1m: 15}"  # the operator priced tokens only


@pytest.fixture(scope="module")
def gateway(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("server-tools")
    price = f"{{input_per_1m: 0, output_per_1m: 0, server_tools: {{web_search: {SEARCH_USD}}}}}"
    with AnthropicUpstream() as upstream:
        (folder / "shunter.yaml").write_text(
            "deployments:\n"
            f"  - {{name: claude, backend: anthropic, base_url: '{upstream.url}',"
            f" api_key_env: UP_KEY, model: claude-x, price: {price}}}\n"
            f"  - {{name: slow, backend: anthropic, base_url: '{upstream.url}',"
            f" api_key_env: UP_KEY, model: slow, price: {price}}}\n"
            f"  - {{name: tokens-only, backend: anthropic, base_url: '{upstream.url}',"
            f" api_key_env: UP_KEY, model: claude-x, price: {TOKENS_ONLY}}}\n"
            "models:\n  claude: {candidates: [claude]}\n  slow: {candidates: [slow]}\n"
            "  tokens-only: {candidates: [tokens-only]}\n"
        )
        env = {
            "SHUNTER_REDIS_URL": redis_server.url,
            "SHUNTER_MASTER_KEY": MASTER,
            "UP_KEY": "sk-up",
        }
        server = start_server(folder / "shunter.yaml", folder / "server.log", env=env)
        try:
            yield server
        finally:
            stop_server(server)


def searching(model: str, max_uses: int, *, stream: bool = False) -> dict[str, Any]:
    tool = {"type": "web_search_20250305", "name": "web_search", "max_uses": max_uses}
    messages = [{"role": "user", "content": "What happened today?"}]
    return {
        "model": model,
        "max_tokens": 64,
        "messages": messages,
        "tools": [tool],
        "stream": stream,
    }


def post(server: Server, key: str, body: dict[str, Any]) -> httpx.Response:
    headers = {"x-api-key": key, "anthropic-version": "2023-06-01"}
    return httpx.post(f"{server.api}/messages", json=body, headers=headers, timeout=30)


def spent_usd(redis: RedisServer, name: str) -> float:
    command = [sys.executable, "-m", "gateway.cli", "keys", "list", "--json"]
    listing = subprocess.run(
        [*command, "--redis-url", redis.url], capture_output=True, text=True, check=True
    ).stdout
    rows = [json.loads(line) for line in listing.splitlines() if line.startswith("{")]
    spent: float = next(r for r in rows if r["name"] == name)["spent_usd"]
    return spent


def test_searches_are_charged_whole_and_streamed(
    redis_server: RedisServer, gateway: Server
) -> None:
    key = redis_server.create_key("--name", "searcher", "--budget", "5")
    whole = post(gateway, key, searching("claude", 50))
    assert whole.status_code == 200, whole.text
    assert whole.json()["usage"]["server_tool_use"] == {"web_search_requests": 50}
    assert spent_usd(redis_server, "searcher") == pytest.approx(50 * SEARCH_USD)
    streamed = post(gateway, key, searching("claude", 7, stream=True))
    assert streamed.status_code == 200, streamed.text
    assert "web_search_requests" in streamed.text
    assert spent_usd(redis_server, "searcher") == pytest.approx(57 * SEARCH_USD)


def test_a_request_in_flight_holds_its_searches_from_the_budget(
    redis_server: RedisServer, gateway: Server
) -> None:
    key = redis_server.create_key("--name", "holder", "--budget", "1")
    first: list[httpx.Response] = []
    # 100 searches at $0.01 may cost the whole budget: held while the answer is on its way
    running = threading.Thread(
        target=lambda: first.append(post(gateway, key, searching("slow", 100)))
    )
    running.start()
    try:
        _wait_for_a_hold(redis_server)
        second = post(gateway, key, searching("claude", 1))
    finally:
        running.join(30)
    assert second.status_code == 429, second.text
    assert "held by requests in flight" in second.json()["error"]["message"]
    assert first[0].status_code == 200
    assert spent_usd(redis_server, "holder") == pytest.approx(100 * SEARCH_USD)


def _wait_for_a_hold(redis: RedisServer) -> None:
    """Until some key's budget holds a request in flight (at most 10 s)."""
    deadline = time.monotonic() + 10
    while "holds" not in (redis.command("KEYS", "shunter:{key:*}:holds") or ""):
        assert time.monotonic() < deadline, "the first request never held its worst case"
        time.sleep(0.02)


def test_a_deployment_priced_for_tokens_bills_searches_at_the_published_price(
    redis_server: RedisServer, gateway: Server
) -> None:
    key = redis_server.create_key("--name", "published", "--budget", "5")
    answer = post(gateway, key, searching("tokens-only", 50))
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["server_tool_use"] == {"web_search_requests": 50}
    spent = spent_usd(redis_server, "published")
    # 50 searches at $10 per 1,000, and a few hundred tokens (well under $0.001)
    assert 50 * 0.01 < spent < 50 * 0.01 + 0.001
